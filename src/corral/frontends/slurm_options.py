"""``sbatch``/``srun``/``salloc`` options (flags, ``#SBATCH`` lines, ``SBATCH_*``) to a
``JobSubmission``.

Precedence, as in Slurm 22.05 (``process_options_second_pass``): script directives, then
input environment variables (``SBATCH_PARTITION``...), then the command line; the last
value of an option wins. Every value is checked when it is applied, so the first bad
option fails with Slurm's own message and exit status:

===========================================  =============================================
bad input                                    message (after ``sbatch: error: ``), exit
===========================================  =============================================
unknown option                               getopt's line + ``Try "sbatch --help"...``, 255
``--time``/``--time-min``/``--begin``        ``Invalid --time specification``, 255
``--mem``/``--mem-per-cpu``/``--mem-per-gpu``  ``Invalid --mem specification``, 255
``-N``                                       ``"x" is not a valid node count``, 255
``-n``/``-c``/... (integers)                 ``Invalid numeric value "x" for --ntasks.``, 1
``--signal``/``--open-mode``/``--exclusive``  ``Invalid --signal specification``..., 255
``--array``                                  ``Batch job submission failed: Invalid job
                                             array specification``, 1
``--dependency``                             ``... failed: Job dependency problem``, 1
``--gres``/``--gpus*``                       ``... failed: Invalid generic resource (gres)
                                             specification``, 1
``-C``, ``-L``, ``-w``/``-x``                ``... failed: Invalid feature specification``
                                             / ``Invalid license specification`` / ``Invalid
                                             node name specified``, 1
===========================================  =============================================

Semantics worth knowing: ``-n N`` without ``-N`` lets the tasks spread (``nodes_min=1``,
``nodes_max=N``); with ``--ntasks-per-node`` the node count is ``ceil(n / per-node)``;
``--mem`` is per node in MB; ``--mem``, ``--mem-per-cpu`` and ``--mem-per-gpu`` are
exclusive on the command line, and one given there replaces the others from the script;
``--time`` rounds seconds up to whole minutes; ``--time=0``/``UNLIMITED`` means no limit
(``extra["time_limit"] = "UNLIMITED"``). Options Corral does not act on (mail, binding,
frequencies...) are accepted and kept in ``JobSubmission.extra`` so nothing is lost.

Public API (also used by the ``sbatch``/``srun``/``salloc`` shims):
``SubmitContext`` (from ``context``), ``SlurmOptions``, ``parse_slurm_args``, ``apply_options``,
``build_submission``, ``parse_sbatch`` -> ``SbatchRequest``.
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from corral.core.model.job import DependencySpec, JobSpec
from corral.core.parse.arrayspec import parse_array
from corral.core.parse.constraint import ConstraintError, compile_constraint
from corral.core.parse.dependency import parse_dependency
from corral.core.parse.errors import ParseError
from corral.core.parse.gres import gpu_request, parse_gpus, parse_gres
from corral.core.parse.hostlist import expand
from corral.core.parse.memory import parse_mem_mb
from corral.core.parse.timefmt import parse_time_limit_s
from corral.frontends.context import SubmitContext
from corral.frontends.directives import DirectiveError, directive_words
from corral.frontends.errors import SubmitError
from corral.frontends.getopt import Arg, GetoptError, OptionTable, Parsed, getopt_long
from corral.frontends.slurm_table import SALLOC_TABLE, SBATCH_TABLE, SRUN_TABLE
from corral.frontends.values import (
    parse_begin,
    parse_export,
    parse_licenses,
    parse_node_count,
    parse_signal,
    parse_switches,
)
from corral.submission import JobSubmission

NICE_MAX = 2147483645  # NICE_OFFSET - 3
MAIL_TYPES = frozenset({
    "NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT",
    "TIME_LIMIT", "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS",
})  # fmt: skip

#: ``SBATCH_*`` input variables and the option each one sets.
SBATCH_ENV: dict[str, str] = {
    "SBATCH_ACCOUNT": "account", "SBATCH_ARRAY_INX": "array", "SBATCH_CLUSTERS": "clusters",
    "SBATCH_CONSTRAINT": "constraint", "SBATCH_CPUS_PER_GPU": "cpus_per_gpu",
    "SBATCH_EXCLUSIVE": "exclusive", "SBATCH_EXPORT": "export", "SBATCH_GPUS": "gpus",
    "SBATCH_GPUS_PER_NODE": "gpus_per_node", "SBATCH_GPUS_PER_TASK": "gpus_per_task",
    "SBATCH_GRES": "gres", "SBATCH_JOB_NAME": "job_name", "SBATCH_MEM_PER_CPU": "mem_per_cpu",
    "SBATCH_MEM_PER_GPU": "mem_per_gpu", "SBATCH_MEM_PER_NODE": "mem",
    "SBATCH_NO_REQUEUE": "no_requeue", "SBATCH_OPEN_MODE": "open_mode",
    "SBATCH_PARTITION": "partition", "SBATCH_QOS": "qos", "SBATCH_REQUEUE": "requeue",
    "SBATCH_RESERVATION": "reservation", "SBATCH_SIGNAL": "signal",
    "SBATCH_TIMELIMIT": "time", "SBATCH_WCKEY": "wckey", "SBATCH_DEPENDENCY": "dependency",
}  # fmt: skip

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


def _set_mem(o: SlurmOptions, key: str, mb: int | None) -> None:
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
        _set_mem(o, key, _mem(c, flag, v))
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
}

_MEM_KEYS = ("mem", "mem_per_cpu", "mem_per_gpu")


def apply_options(
    opts: SlurmOptions, parsed: Sequence[Parsed], ctx: SubmitContext, source: str
) -> None:
    """Apply options in order (later ones win). ``source``: script, env or cli."""
    if source == "cli":
        given = sorted({p.opt.key for p in parsed if p.opt.key in _MEM_KEYS})
        if len(given) > 1:
            raise SubmitError(
                f"{ctx.prog}: fatal: --mem, --mem-per-cpu, and --mem-per-gpu are mutually "
                "exclusive.",
                1,
            )
        if given:  # one on the command line replaces the others from the script/env
            _set_mem(opts, given[0], None)
    for p in parsed:
        key = p.opt.key
        handler = HANDLERS.get(key)
        if handler is not None:
            handler(opts, p.value, ctx)
        else:
            opts.extra[key] = p.value if p.value is not None else "set"
        opts.raw[key] = p.value
        opts.source[key] = source


def _table(prog: str) -> OptionTable:
    return {"srun": SRUN_TABLE, "salloc": SALLOC_TABLE}.get(prog, SBATCH_TABLE)


def parse_slurm_args(
    argv: Sequence[str], ctx: SubmitContext, table: OptionTable | None = None
) -> tuple[list[Parsed], list[str]]:
    """getopt the command line; unknown options fail exactly like the real command."""
    try:
        return getopt_long(argv, table or _table(ctx.prog), ctx.prog)
    except GetoptError as exc:
        raise SubmitError(
            f'{exc.message}\nTry "{ctx.prog} --help" for more information', 255
        ) from None


def env_options(
    ctx: SubmitContext, table: OptionTable | None = None, mapping: Mapping[str, str] = SBATCH_ENV
) -> list[Parsed]:
    """Options set by input environment variables (``SBATCH_PARTITION=...``)."""
    tbl = table or _table(ctx.prog)
    by_key = {o.key: o for o in tbl.opts}
    out: list[Parsed] = []
    for var, key in mapping.items():
        if var in ctx.env and key in by_key:
            value = ctx.env[var]
            opt = by_key[key]
            out.append(Parsed(opt, None if opt.arg is Arg.NONE else value, var))
    return out


def script_options(
    script: str, ctx: SubmitContext, table: OptionTable | None = None
) -> list[Parsed]:
    """The options of the ``#SBATCH`` lines, with Slurm's errors for bad directives."""
    try:
        words = directive_words(script, ("#SBATCH", "#SLURM"))
    except DirectiveError as exc:
        raise ctx.error(exc.message, 255) from None
    try:
        parsed, rest = getopt_long(words, table or _table(ctx.prog), ctx.prog,
                                   stop_at_positional=False)
    except GetoptError as exc:
        raise SubmitError(
            f"{exc.message}\n{ctx.prog}: error: Invalid directive found in batch script: "
            f"{exc.word}",
            255,
        ) from None
    if rest:
        raise ctx.error(f"Invalid directive found in batch script: {rest[0]}", 255)
    return parsed


# ---- from options to a submission -----------------------------------------------------


def _node_range(o: SlurmOptions) -> tuple[int, int | None]:
    if o.nodes is not None:
        return o.nodes
    if o.ntasks is not None:
        if o.ntasks_per_node:
            n = max(1, math.ceil(o.ntasks / o.ntasks_per_node))
            return n, None
        return 1, (o.ntasks if o.ntasks > 1 else None)
    return 1, None


def build_submission(
    opts: SlurmOptions,
    ctx: SubmitContext,
    *,
    script: str | None,
    argv: Sequence[str] = (),
    default_name: str = "sbatch",
    interactive: bool = False,
) -> JobSubmission:
    """The ``JobSubmission`` for options already applied (directives, env, flags)."""
    nodes_min, nodes_max = _node_range(opts)
    max_nodes = nodes_max if nodes_max is not None else nodes_min
    extra = dict(opts.extra)

    gpus, gpu_type = opts.gpus if opts.gpus else (0, None)
    gpn, gpn_type = opts.gpus_per_node if opts.gpus_per_node else (0, None)
    if opts.gres_gpus and not opts.gpus_per_node:
        gpn, gpn_type = opts.gres_gpus
    gpt, gpt_type = opts.gpus_per_task if opts.gpus_per_task else (0, None)
    types = {t for t in (gpu_type, gpn_type, gpt_type) if t}
    if len(types) > 1:
        raise ctx.rejected("Invalid generic resource (gres) specification")
    the_type = types.pop() if types else None

    tasks_per_node = opts.ntasks_per_node or (
        opts.ntasks if opts.ntasks is not None and max_nodes == 1 else 1
    )
    gpus_on_node = gpn or gpt * tasks_per_node or (gpus if max_nodes == 1 else 0)

    mem_per_node = opts.mem_mb
    if opts.mem_per_gpu_mb is not None:
        extra["mem_per_gpu_mb"] = str(opts.mem_per_gpu_mb)
        if gpus_on_node:
            mem_per_node = opts.mem_per_gpu_mb * gpus_on_node

    cpus_per_task = opts.cpus_per_task
    if opts.cpus_per_gpu is not None:
        extra["cpus_per_gpu"] = str(opts.cpus_per_gpu)
        if cpus_per_task is None:
            if gpt:
                cpus_per_task = opts.cpus_per_gpu * gpt
            elif gpus_on_node:
                cpus_per_task = max(1, opts.cpus_per_gpu * gpus_on_node // tasks_per_node)

    if opts.time_unlimited:
        extra["time_limit"] = "UNLIMITED"
    env_mode = "ALL"
    env: dict[str, str] = dict(ctx.env)
    if opts.export is not None:
        try:
            env_mode, env = parse_export(opts.export, ctx.env)
        except ValueError as exc:
            raise ctx.error(f"Invalid --export specification: {exc}") from None
    extra["export"] = env_mode
    extra["submit_dir"] = ctx.cwd
    if ctx.host:
        extra["submit_host"] = ctx.host

    switches, switches_wait = opts.switches if opts.switches else (None, 0)
    spec = JobSpec(
        name=opts.job_name if opts.job_name else default_name,
        user=ctx.user,
        uid=ctx.uid,
        gid=ctx.gid,
        account=opts.account,
        partitions=opts.partitions or (),
        qos=opts.qos,
        nodes_min=nodes_min,
        nodes_max=nodes_max,
        ntasks=opts.ntasks,
        ntasks_per_node=opts.ntasks_per_node,
        cpus_per_task=cpus_per_task or 1,
        mem_per_node_mb=mem_per_node,
        mem_per_cpu_mb=opts.mem_per_cpu_mb,
        gpus=gpus,
        gpus_per_node=gpn,
        gpus_per_task=gpt,
        gpu_type=the_type,
        gres=opts.gres or (),
        licenses=opts.licenses or (),
        time_limit_s=opts.time_limit_s,
        time_min_s=opts.time_min_s,
        constraint=opts.constraint,
        exclusive=bool(opts.exclusive),
        switches=switches,
        switches_wait_s=switches_wait,
        nodelist=opts.nodelist or (),
        exclude=opts.exclude or (),
        dependency=opts.dependency,
        nice=opts.nice or 0,
        begin_time=opts.begin_time,
        requeue=True if opts.requeue is None else opts.requeue,
        spread=opts.spread,
        comment=opts.comment or "",
    )
    return JobSubmission(
        spec=spec,
        script=script,
        argv=tuple(argv),
        workdir=opts.chdir or ctx.cwd,
        env=env,
        stdout=opts.output,
        stderr=opts.error,
        stdin=opts.input,
        array=opts.array,
        signal=opts.signal,
        open_mode=opts.open_mode or "truncate",
        hold=opts.hold,
        dialect="slurm",
        interactive=interactive,
        extra=extra,
    )


# ---- sbatch ----------------------------------------------------------------------------


WRAP_HEADER = "#!/bin/sh\n# This script was created by sbatch --wrap.\n\n"


@dataclass(frozen=True)
class SbatchRequest:
    """A parsed ``sbatch`` call: the submission plus how to report it."""

    submission: JobSubmission
    options: SlurmOptions
    script_path: str | None  # None for --wrap and stdin
    local: dict[str, str | None] = field(default_factory=dict)  # caller's own options


def _read_script(ctx: SubmitContext, path: str | None) -> str:
    if path is None or path == "-":
        if ctx.read_stdin is None:
            raise ctx.error("Batch script is empty!", 1)
        return ctx.read_stdin()
    if ctx.read_file is None:
        raise ctx.error(f"Unable to open file {path}", 1)
    try:
        return ctx.read_file(path)
    except IsADirectoryError:
        raise ctx.error(f"Unable to open file {path}", 1) from None
    except OSError:
        raise ctx.error(f"Unable to open file {path}", 1) from None


def check_script(ctx: SubmitContext, script: str) -> None:
    """sbatch's checks of a batch script's text."""
    if not script:
        raise ctx.error("Batch script is empty!", 1)
    if not script.strip():
        raise ctx.error("Batch script contains only whitespace!", 1)
    if not script.startswith("#!"):
        p = f"{ctx.prog}: error: "
        raise SubmitError(
            f"{p}This does not look like a batch script.  The first\n"
            f"{p}line must start with #! followed by the path to an interpreter.\n"
            f"{p}For instance: #!/bin/sh",
            1,
        )
    if "\r\n" in script:
        p = f"{ctx.prog}: error: "
        raise SubmitError(
            f"{p}Batch script contains DOS line breaks (\\r\\n)\n"
            f"{p}instead of expected UNIX line breaks (\\n).",
            1,
        )
    if "\0" in script:
        raise ctx.error("The SLURM controller does not allow scripts that contain a NULL "
                        "character '\\0'.", 1)


def parse_sbatch(
    argv: Sequence[str],
    ctx: SubmitContext,
    *,
    table: OptionTable | None = None,
    local_keys: frozenset[str] = frozenset(),
) -> SbatchRequest:
    """Parse an ``sbatch`` call completely: flags, script (file, stdin or ``--wrap``),
    ``#SBATCH`` lines and ``SBATCH_*`` variables. Raises ``SubmitError`` on bad input.

    ``--help``/``--usage``/``--version`` are reported through ``options`` (the caller
    prints them); the script is not read then. A caller with options of its own (such as
    ``corral submit --json``) passes a ``table`` that has them and their keys in
    ``local_keys``: they come back in ``SbatchRequest.local`` and nowhere else.
    """
    cli, positional = parse_slurm_args(argv, ctx, table)
    local = {p.opt.key: p.value for p in cli if p.opt.key in local_keys}
    cli = [p for p in cli if p.opt.key not in local_keys]
    probe = SlurmOptions()
    for p in cli:  # first pass: what decides where the script comes from
        if p.opt.key in ("wrap", "help", "usage", "version"):
            HANDLERS[p.opt.key](probe, p.value, ctx)
    if probe.help or probe.usage or probe.version:
        opts = SlurmOptions()
        apply_options(opts, [p for p in cli if p.opt.key in ("help", "usage", "version")],
                      ctx, "cli")
        dummy = JobSubmission(spec=JobSpec(), workdir=ctx.cwd)
        return SbatchRequest(dummy, opts, None, local)

    script_path: str | None = None
    script_args: list[str] = []
    if probe.wrap is not None:
        if positional:
            raise ctx.error("script arguments not permitted with --wrap option", 1)
        script = WRAP_HEADER + probe.wrap + "\n"
        default_name = "wrap"
    else:
        if positional:
            script_path, script_args = positional[0], positional[1:]
        script = _read_script(ctx, script_path)
        check_script(ctx, script)
        default_name = posixpath.basename(script_path) if script_path else "sbatch"
        if script_path in ("/dev/stdin", "-"):
            default_name = "sbatch"

    opts = SlurmOptions()
    apply_options(opts, script_options(script, ctx), ctx, "script")
    apply_options(opts, env_options(ctx), ctx, "env")
    apply_options(opts, cli, ctx, "cli")
    sub = build_submission(opts, ctx, script=script, argv=script_args,
                           default_name=default_name)
    if script_path is not None and script_path not in ("-", "/dev/stdin"):
        sub.extra["script_path"] = ctx.abspath(script_path)  # scontrol's Command=
    return SbatchRequest(sub, opts, script_path, local)
