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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from corral.core.model.job import JobSpec
from corral.frontends.container_options import finish as finish_container
from corral.frontends.context import SubmitContext, local_context
from corral.frontends.directives import DirectiveError, directive_words
from corral.frontends.errors import SubmitError
from corral.frontends.getopt import Arg, GetoptError, OptionTable, Parsed, getopt_long
from corral.frontends.slurm_handlers import HANDLERS, SlurmOptions, set_mem
from corral.frontends.slurm_table import SALLOC_TABLE, SBATCH_TABLE, SRUN_TABLE
from corral.frontends.values import parse_export
from corral.frontends.vm_options import runtime_of
from corral.submission import JobSubmission

__all__ = [
    "SubmitContext", "local_context", "SlurmOptions", "HANDLERS", "SBATCH_ENV",
    "apply_options", "parse_slurm_args", "env_options", "script_options", "build_submission",
    "SbatchRequest", "check_script", "parse_sbatch",
]

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
            set_mem(opts, given[0], None)
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
    out: list[Parsed] = []
    env = ctx.env
    for var, key in mapping.items():
        if var in env:
            opt = tbl.by_key(key)
            if opt is not None:
                out.append(Parsed(opt, None if opt.arg is Arg.NONE else env[var], var))
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
    if opts.open_mode:  # given explicitly: the job sees SLURM_OPEN_MODE (a or t)
        extra["open_mode"] = opts.open_mode
    extra["submit_dir"] = ctx.cwd
    finish_container(opts.container, ctx, extra)
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
        runtime=runtime_of(extra),
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
