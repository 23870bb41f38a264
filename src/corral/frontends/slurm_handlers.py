"""How each ``sbatch``/``srun``/``salloc`` option changes ``SlurmOptions``.

``SlurmOptions`` holds the converted values of one call (``None``: not given).
``HANDLERS[key](opts, value, ctx)`` applies one occurrence of option ``key`` and raises
``SubmitError`` with Slurm's message and exit status when the value is bad (the table of
messages is in ``slurm_options``). Options without a handler are recorded in
``SlurmOptions.extra`` by ``slurm_options.apply_options``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from corral.core.model.job import DependencySpec
from corral.core.parse.arrayspec import parse_array
from corral.core.parse.constraint import ConstraintError, compile_constraint
from corral.core.parse.dependency import parse_dependency
from corral.core.parse.errors import ParseError
from corral.core.parse.gres import gpu_request, parse_gpus, parse_gres
from corral.core.parse.hostlist import expand
from corral.core.parse.memory import parse_mem_mb
from corral.core.parse.timefmt import parse_time_limit_s
from corral.frontends.container_options import HANDLERS as CONTAINER_HANDLERS
from corral.frontends.container_options import ContainerDraft
from corral.frontends.context import SubmitContext
from corral.frontends.values import (
    parse_begin,
    parse_licenses,
    parse_node_count,
    parse_signal,
    parse_switches,
)
from corral.frontends.vm_options import handle_vm

NICE_MAX = 2147483645  # NICE_OFFSET - 3
MAIL_TYPES = frozenset({
    "NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT",
    "TIME_LIMIT", "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS",
})  # fmt: skip

#: ``SBATCH_*`` input variables and the option each one sets.


@dataclass
class SlurmOptions:
    """The options of one call, converted; ``None`` means "not given"."""

    raw: dict[str, str | None] = field(default_factory=dict)  # last spelling of each key
    source: dict[str, str] = field(default_factory=dict)  # key -> script | env | cli
    job_name: str | None = None
    partitions: tuple[str, ...] | None = None
    account: str | None = None
    qos: str | None = None
    nodes: tuple[int, int | None] | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    cpus_per_gpu: int | None = None
    mem_mb: int | None = None
    mem_per_cpu_mb: int | None = None
    mem_per_gpu_mb: int | None = None
    gpus: tuple[int, str | None] | None = None  # per job
    gpus_per_node: tuple[int, str | None] | None = None
    gpus_per_task: tuple[int, str | None] | None = None
    gres: tuple[tuple[str, int], ...] | None = None
    gres_gpus: tuple[int, str | None] | None = None  # the gpu part of --gres (per node)
    licenses: tuple[tuple[str, int], ...] | None = None
    time_limit_s: int | None = None
    time_unlimited: bool = False
    time_min_s: int | None = None
    constraint: str | None = None
    exclusive: bool | None = None
    nodelist: tuple[str, ...] | None = None
    exclude: tuple[str, ...] | None = None
    switches: tuple[int, int] | None = None
    begin_time: float | None = None
    dependency: DependencySpec | None = None
    array: str | None = None
    hold: bool = False
    nice: int | None = None
    requeue: bool | None = None
    signal: str | None = None
    output: str | None = None
    error: str | None = None
    input: str | None = None
    open_mode: str | None = None
    chdir: str | None = None
    export: str | None = None
    wrap: str | None = None
    comment: str | None = None
    spread: bool = False
    parsable: bool = False
    quiet: bool = False
    verbose: int = 0
    test_only: bool = False
    wait: bool = False
    help: bool = False
    usage: bool = False
    version: bool = False
    container: ContainerDraft = field(default_factory=ContainerDraft)
    extra: dict[str, str] = field(default_factory=dict)  # accepted, not modelled


# ---- applying one option ---------------------------------------------------------------

Handler = Callable[[SlurmOptions, str | None, SubmitContext], None]


def _int(ctx: SubmitContext, name: str, value: str | None, positive: bool = True) -> int:
    v = (value or "").strip()
    ok = v.lstrip("-").isdigit() and v.isascii()
    n = int(v) if ok else 0
    if not ok or n < 0 or (positive and n == 0):
        raise ctx.error(f'Invalid numeric value "{value}" for {name}.', 1)
    return n


def _mem(ctx: SubmitContext, flag: str, value: str | None) -> int:
    try:
        return parse_mem_mb(value or "")
    except ParseError:
        raise ctx.error(f"Invalid {flag} specification") from None


def _gpus(ctx: SubmitContext, value: str | None) -> tuple[int, str | None]:
    try:
        count, gtype, _ = gpu_request(parse_gpus(value or ""), value or "")
    except ParseError:
        raise ctx.rejected("Invalid generic resource (gres) specification") from None
    return count, gtype


def _hosts(ctx: SubmitContext, value: str | None) -> tuple[str, ...]:
    text = (value or "").strip()
    if "/" in text:  # a file of node names, as Slurm decides
        if ctx.read_file is None:
            raise ctx.error(f"Unable to open file {text}", 1)
        try:
            text = ctx.read_file(text)
        except OSError:
            raise ctx.error(f"Unable to open file {text}", 1) from None
        text = ",".join(text.split())
    if not text:
        return ()
    try:
        return tuple(expand(text))
    except ParseError:
        raise ctx.rejected("Invalid node name specified") from None


_MEM_ATTR = {"mem": "mem_mb", "mem_per_cpu": "mem_per_cpu_mb", "mem_per_gpu": "mem_per_gpu_mb"}


def set_mem(o: SlurmOptions, key: str, mb: int | None) -> None:
    """Set one memory option and clear the other two (they are exclusive)."""
    for k, attr in _MEM_ATTR.items():
        setattr(o, attr, mb if k == key else None)


def _h_partition(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
    parts = tuple(p.strip() for p in (v or "").split(",") if p.strip())
    o.partitions = parts or None


def _h_nodes(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
    text = (v or "").strip()
    try:
        o.nodes = parse_node_count(text)
    except ValueError as exc:
        lo_s, dash, hi_s = text.partition("-")
        if "below minimum" in str(exc):
            raise c.error(
                f"Maximum node count {hi_s} is less than minimum node count {lo_s}"
            ) from None
        bad = lo_s if dash and not lo_s.isdigit() else text
        raise c.error(f'"{bad}" is not a valid node count') from None


def _h_time(flag: str, attr: str) -> Handler:
    def handle(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
        try:
            secs = parse_time_limit_s(v or "")
        except ParseError:
            raise c.error(f"Invalid {flag} specification") from None
        if secs is not None:
            secs = math.ceil(secs / 60) * 60  # Slurm keeps minutes, rounding seconds up
        setattr(o, attr, secs)
        if attr == "time_limit_s":
            o.time_unlimited = secs is None
    return handle


def _h_begin(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
    try:
        o.begin_time = parse_begin(v or "", c.now)
    except ValueError:
        raise c.error("Invalid --begin specification") from None


def _h_deadline(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
    try:
        o.extra["deadline"] = repr(parse_begin(v or "", c.now))
    except ValueError:
        raise c.error("Invalid --deadline specification") from None


def _h_array(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
    try:
        parse_array(v or "", max_array_size=c.max_array_size)
    except ParseError:
        raise c.rejected("Invalid job array specification") from None
    o.array = (v or "").strip()


def _h_dependency(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
    if not (v or "").strip():
        o.dependency = None
        return
    try:
        o.dependency = parse_dependency(v or "")
    except ParseError:
        raise c.rejected("Job dependency problem") from None


def _h_gres(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
    try:
        count, gtype, other = gpu_request(parse_gres(v or ""), v or "")
    except ParseError:
        raise c.rejected("Invalid generic resource (gres) specification") from None
    o.gres = other
    o.gres_gpus = (count, gtype) if count else None


def _h_constraint(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
    text = (v or "").strip()
    if text:
        try:
            compile_constraint(text)
        except ConstraintError:
            raise c.rejected("Invalid feature specification") from None
    o.constraint = text or None


def _h_licenses(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
    try:
        o.licenses = parse_licenses(v or "")
    except ValueError:
        raise c.rejected("Invalid license specification") from None


def _h_nice(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
    if v is None:
        o.nice = 100
        return
    text = v.strip()
    if not text.lstrip("+-").isdigit():
        raise c.error(f"Invalid --nice value: {v}")
    n = int(text)
    if abs(n) > NICE_MAX:
        raise c.error(f"Invalid --nice value, out of range (+/- {NICE_MAX})")
    o.nice = n


def _h_signal(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
    try:
        o.signal = parse_signal(v or "")
    except ValueError:
        raise c.error("Invalid --signal specification") from None


def _h_open_mode(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
    first = (v or "")[:1].lower()
    if first not in ("a", "t"):
        raise c.error("Invalid --open-mode specification")
    o.open_mode = "append" if first == "a" else "truncate"


def _h_exclusive(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
    mode = (v or "exclusive").lower()
    if mode not in ("exclusive", "oversubscribe", "user", "mcs", "topo"):
        raise c.error("Invalid --exclusive specification")
    o.exclusive = mode != "oversubscribe"
    if mode in ("user", "mcs", "topo"):
        o.extra["exclusive"] = mode
    else:
        o.extra.pop("exclusive", None)


def _h_switches(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
    try:
        o.switches = parse_switches(v or "")
    except (ValueError, ParseError):
        raise c.error(f'Invalid numeric value "{v}" for --switches.', 1) from None


def _h_mail_type(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
    kinds = [k.strip().upper() for k in (v or "").split(",")]
    if not kinds or any(k not in MAIL_TYPES for k in kinds):
        raise c.error("Invalid --mail-type specification")
    o.extra["mail_type"] = ",".join(kinds)


def _h_uid(flag: str) -> Handler:
    def handle(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
        if c.uid != 0:
            raise c.error(f"--{flag} only permitted by root user")
        o.extra[flag] = v or ""
    return handle


def _h_io(attr: str) -> Handler:
    def handle(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
        text = v or ""
        setattr(o, attr, "/dev/null" if text.lower() == "none" else text)
    return handle


def _h_int(attr: str, flag: str) -> Handler:
    def handle(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
        setattr(o, attr, _int(c, flag, v))
    return handle


def _h_mem(key: str, flag: str) -> Handler:
    def handle(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
        set_mem(o, key, _mem(c, flag, v))
    return handle


def _h_gpu_attr(attr: str) -> Handler:
    def handle(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
        setattr(o, attr, _gpus(c, v))
    return handle


def _h_str(attr: str, empty_is_none: bool = False) -> Handler:
    def handle(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
        text = v if v is not None else ""
        setattr(o, attr, None if empty_is_none and not text.strip() else text)
    return handle


def _h_flag(attr: str, value: bool = True) -> Handler:
    def handle(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
        setattr(o, attr, value)
    return handle


def _h_hosts(attr: str) -> Handler:
    def handle(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
        setattr(o, attr, _hosts(c, v))
    return handle


def _h_chdir(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
    o.chdir = c.abspath(v or ".")


def _h_verbose(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
    o.verbose += 1


HANDLERS: dict[str, Handler] = {
    "job_name": _h_str("job_name"),
    "partition": _h_partition,
    "account": _h_str("account", empty_is_none=True),
    "qos": _h_str("qos", empty_is_none=True),
    "comment": _h_str("comment"),
    "nodes": _h_nodes,
    "ntasks": _h_int("ntasks", "--ntasks"),
    "ntasks_per_node": _h_int("ntasks_per_node", "--ntasks-per-node"),
    "cpus_per_task": _h_int("cpus_per_task", "--cpus-per-task"),
    "cpus_per_gpu": _h_int("cpus_per_gpu", "--cpus-per-gpu"),
    "mem": _h_mem("mem", "--mem"),
    "mem_per_cpu": _h_mem("mem_per_cpu", "--mem-per-cpu"),
    "mem_per_gpu": _h_mem("mem_per_gpu", "--mem-per-gpu"),
    "gpus": _h_gpu_attr("gpus"),
    "gpus_per_node": _h_gpu_attr("gpus_per_node"),
    "gpus_per_task": _h_gpu_attr("gpus_per_task"),
    "gres": _h_gres,
    "licenses": _h_licenses,
    "time": _h_time("--time", "time_limit_s"),
    "time_min": _h_time("--time-min", "time_min_s"),
    "begin": _h_begin,
    "deadline": _h_deadline,
    "constraint": _h_constraint,
    "exclusive": _h_exclusive,
    "oversubscribe": _h_flag("exclusive", False),
    "nodelist": _h_hosts("nodelist"),
    "exclude": _h_hosts("exclude"),
    "switches": _h_switches,
    "spread_job": _h_flag("spread"),
    "array": _h_array,
    "dependency": _h_dependency,
    "hold": _h_flag("hold"),
    "nice": _h_nice,
    "requeue": _h_flag("requeue", True),
    "no_requeue": _h_flag("requeue", False),
    "signal": _h_signal,
    "output": _h_io("output"),
    "error": _h_io("error"),
    "input": _h_io("input"),
    "open_mode": _h_open_mode,
    "chdir": _h_chdir,
    "export": _h_str("export"),
    "wrap": _h_str("wrap"),
    "mail_type": _h_mail_type,
    "uid": _h_uid("uid"),
    "gid": _h_uid("gid"),
    "parsable": _h_flag("parsable"),
    "quiet": _h_flag("quiet"),
    "verbose": _h_verbose,
    "test_only": _h_flag("test_only"),
    "wait": _h_flag("wait"),
    "help": _h_flag("help"),
    "usage": _h_flag("usage"),
    "version": _h_flag("version"),
    "vm": handle_vm,
}


def _h_container(key: str) -> Handler:
    inner = CONTAINER_HANDLERS[key]

    def handle(o: SlurmOptions, v: str | None, c: SubmitContext) -> None:
        inner(o.container, v, c)
    return handle


HANDLERS.update({key: _h_container(key) for key in CONTAINER_HANDLERS})
