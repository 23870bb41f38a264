"""``JobSubmission``: what every front end produces and the controller API accepts.

The scheduling core only needs the ``JobSpec``; the rest (script, environment, output
paths, array range, signals) is what the controller stores and the agent needs to launch.
Front ends (``corral submit``, ``sbatch``, ``qsub``, Volcano YAML, the web form) build one
of these; ``to_json``/``from_json`` are the wire form.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from corral.core.model.job import Dependency, DependencyKind, DependencySpec, JobSpec, TaskGroup


@dataclass(frozen=True)
class JobSubmission:
    spec: JobSpec
    script: str | None = None  # batch script text (read at submit time)
    argv: tuple[str, ...] = ()  # command to run when there is no script (--wrap, srun)
    workdir: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    stdout: str | None = None  # filename pattern (%j %x %u %A %a %N ...); None: dialect default
    stderr: str | None = None  # None: same file as stdout
    stdin: str | None = None
    array: str | None = None  # array spec text, e.g. "1-10:2%4"
    signal: str | None = None  # "[B:]SIG@secs" as in --signal
    open_mode: str = "truncate"  # or "append"
    hold: bool = False
    dialect: str = "native"  # native | slurm | pbs | volcano
    interactive: bool = False  # salloc/srun allocation without a batch script
    extra: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """``dataclasses.asdict(self)`` (the same dicts, tuples and values), in one pass
        with each class's field names looked up once (``asdict`` cost about 0.5 ms per
        submission, a fifth of the controller's CPU per job in a shell loop of sbatch)."""
        out: dict[str, Any] = _plain(self)
        return out

    @staticmethod
    def from_json(data: dict[str, Any]) -> JobSubmission:
        d = dict(data)
        d["spec"] = spec_from_json(d["spec"])
        d["argv"] = tuple(d.get("argv") or ())
        return JobSubmission(**d)


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}
_ATOMS = frozenset({str, int, float, bool, type(None)})


def _plain(v: Any) -> Any:
    """``dataclasses.asdict``'s conversion of one value: dataclasses to dicts, lists,
    tuples and dicts rebuilt with their items converted, enum members and other atoms as
    they are; anything else through ``asdict`` itself (its ``deepcopy``)."""
    cls = type(v)
    if cls in _ATOMS:
        return v
    atoms = _ATOMS  # checked here, not in a call per item: most values are atoms
    names = _FIELD_NAMES.get(cls)
    if names is not None:
        out = {}
        for n in names:
            x = getattr(v, n)
            out[n] = x if type(x) in atoms else _plain(x)
        return out
    if cls is tuple or cls is list:
        return cls([x if type(x) in atoms else _plain(x) for x in v])
    if cls is dict:
        return {k if type(k) in atoms else _plain(k): x if type(x) in atoms else _plain(x)
                for k, x in v.items()}
    if isinstance(v, Enum):
        return v  # deepcopy keeps a member as it is
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        _FIELD_NAMES[cls] = tuple(f.name for f in dataclasses.fields(v))
        return _plain(v)
    return dataclasses.asdict(_Box(v))["v"]


@dataclass(frozen=True)
class _Box:
    """``asdict``'s handling of an unusual value (a named tuple, a subclass of a
    container): boxed in a dataclass of one field."""

    v: Any


def spec_from_json(data: dict[str, Any]) -> JobSpec:
    d = dict(data)
    for key in ("partitions", "nodelist", "exclude", "prefer_nodes"):
        d[key] = tuple(d.get(key) or ())
    for key in ("gres", "licenses"):
        d[key] = tuple((str(k), int(v)) for k, v in (d.get(key) or ()))
    d["task_groups"] = tuple(
        TaskGroup(**{**g, "gres": tuple((str(k), int(v)) for k, v in g.get("gres") or ())})
        for g in d.get("task_groups") or ())
    dep = d.get("dependency")
    if dep is not None:
        d["dependency"] = DependencySpec(
            items=tuple(
                Dependency(DependencyKind(i["kind"]), tuple(i.get("job_ids") or ()),
                           int(i.get("delay_s", 0)),
                           None if i.get("array_task_id") is None else int(i["array_task_id"]))
                for i in dep.get("items") or ()
            ),
            any_of=bool(dep.get("any_of", False)),
        )
    return JobSpec(**d)
