"""Job dependency expressions (``sbatch --dependency``) to the model's ``DependencySpec``.

Grammar (Slurm 22.05)::

    spec  := cond (',' cond)*          -- all conditions must hold
           | cond ('?' cond)*          -- any one condition suffices (no mixing with ',')
    cond  := TYPE ':' ref (':' ref)*   -- TYPE: after afterany afterok afternotok aftercorr
           | 'singleton'
           | ref (':' ref)*            -- legacy form without a type: afterany
    ref   := JOBID ('_' (TASK | '*'))? ('+' MINUTES)?

Representation (as Slurm's own dependency list): **one ``Dependency`` per referenced
job**, in the order written, each with exactly one id in ``job_ids`` (``singleton`` has
none). ``,``/``?`` then apply between items without ambiguity: ``DependencySpec.any_of`` is
True for ``?``. ``+MINUTES`` is stored as ``delay_s`` (Slurm documents it for ``after``;
it is accepted on every type, as Slurm's parser does). ``123_4`` refers to task 4 of array
job 123 (``Dependency.array_task_id = 4``); ``123`` and ``123_*`` mean the whole job, i.e.
every task of it when it is an array (``array_task_id = None``).

Errors raise ``ParseError`` with Slurm's message ``Job dependency problem`` and the
precise reason (unknown type, missing or non-numeric job id, mixed separators...).
``afterburstbuffer`` is rejected: Corral has no burst buffers.
"""

from __future__ import annotations

from corral.core.model.job import Dependency, DependencyKind, DependencySpec
from corral.core.parse.errors import ParseError

SLURM_DEPENDENCY_MSG = "Job dependency problem"
_KINDS = {k.value: k for k in DependencyKind}


def _err(text: str, reason: str) -> ParseError:
    return ParseError("dependency", text, reason, slurm_message=SLURM_DEPENDENCY_MSG)


def _digits(s: str) -> bool:
    return s.isdigit() and s.isascii()


def _parse_ref(text: str, kind: DependencyKind, ref: str) -> Dependency:
    body, plus, minutes_s = ref.partition("+")
    delay_s = 0
    if plus:
        if not _digits(minutes_s):
            raise _err(text, f"delay {minutes_s!r} after '+' is not a whole number of minutes")
        delay_s = int(minutes_s) * 60
    job_s, under, task_s = body.partition("_")
    if not job_s:
        raise _err(text, f"missing job id in {ref!r}" if ref else "missing job id")
    if not _digits(job_s) or int(job_s) < 1:
        raise _err(text, f"job id {job_s!r} is not a positive whole number")
    task: int | None = None
    if under:
        if task_s == "*":
            task = None
        elif _digits(task_s):
            task = int(task_s)
            if kind is DependencyKind.AFTERCORR:
                raise _err(text, "aftercorr takes whole array jobs, not single tasks")
        else:
            raise _err(text, f"array task {task_s!r} in {ref!r} is not a number or '*'")
    return Dependency(kind, (int(job_s),), delay_s, task)


def _parse_cond(text: str, cond: str) -> list[Dependency]:
    if not cond:
        raise _err(text, "empty condition (doubled or trailing separator)")
    head, colon, rest = cond.partition(":")
    if head[:1].isdigit():  # legacy "123:456": afterany
        return [_parse_ref(text, DependencyKind.AFTERANY, r) for r in cond.split(":")]
    name = head.lower()
    if name == "singleton":
        if colon:
            raise _err(text, "singleton takes no job ids")
        return [Dependency(DependencyKind.SINGLETON)]
    if name == "afterburstbuffer":
        raise _err(text, "afterburstbuffer is not supported (no burst buffers here)")
    kind = _KINDS.get(name)
    if kind is None or kind is DependencyKind.SINGLETON:
        known = ", ".join(k for k in _KINDS)
        raise _err(text, f"unknown dependency type {head!r} (known: {known})")
    if not colon or not rest:
        raise _err(text, f"{name} needs at least one job id ({name}:JOBID)")
    return [_parse_ref(text, kind, r) for r in rest.split(":")]


def parse_dependency(text: str) -> DependencySpec:
    """``parse_dependency("afterok:12:13,afterany:14")``: one item per referenced job."""
    s = text.strip()
    if not s:
        raise _err(text, "empty dependency")
    if "," in s and "?" in s:
        raise _err(text, "',' (all of) and '?' (any of) cannot be mixed")
    any_of = "?" in s
    items: list[Dependency] = []
    for cond in s.split("?" if any_of else ","):
        items.extend(_parse_cond(text, cond.strip()))
    return DependencySpec(tuple(items), any_of)


def _ref_text(dep: Dependency, job_id: int) -> str:
    out = str(job_id)
    if dep.array_task_id is not None:
        out += f"_{dep.array_task_id}"
    if dep.delay_s:
        out += f"+{dep.delay_s // 60}"
    return out


def format_dependency(spec: DependencySpec) -> str:
    """Slurm's text form; consecutive items of one type share a ``type:`` prefix.

    ``format_dependency(parse_dependency(s))`` is a canonical spelling of ``s``.
    """
    sep = "?" if spec.any_of else ","
    conds: list[str] = []
    last_kind: DependencyKind | None = None
    for dep in spec.items:
        if dep.kind is DependencyKind.SINGLETON:
            conds.append("singleton")
            last_kind = None
            continue
        refs = ":".join(_ref_text(dep, j) for j in dep.job_ids)
        if dep.kind is last_kind:
            conds[-1] += f":{refs}"
        else:
            conds.append(f"{dep.kind.value}:{refs}")
            last_kind = dep.kind
    return sep.join(conds)
