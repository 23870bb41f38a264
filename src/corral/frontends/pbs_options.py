"""``qsub`` flags and ``#PBS`` directives (PBS Pro / OpenPBS, plus Torque's ``-t``, ``-d``)
to a ``JobSubmission``.

Precedence: the command line beats directives; ``-l`` and ``-W`` merge per resource /
attribute (``qsub -l walltime=1:00:00`` keeps the script's ``select``). Directives are the
``#PBS`` lines before the first command (``-C PREFIX`` changes the prefix, ``-C ""`` turns
them off).

Unit differences from Slurm: ``walltime=600`` is 600 SECONDS; ``mem=5678`` is 5678 BYTES.

Defaults as PBS: the job starts in ``$HOME`` (scripts ``cd $PBS_O_WORKDIR``); output goes to
``<name>.o<id>`` / ``<name>.e<id>`` in the submit directory; a path ending in ``/`` or naming
an existing directory is a directory (``<id>.OU`` / ``<id>.ER`` inside it); ``-j oe`` joins
stderr into stdout; the environment is NOT exported unless ``-V`` (``-v`` passes listed
variables); ``PBS_O_*`` values of the submit side are always passed.

Errors and exit codes (documented choice; qsub exits with ``pbs_errno & 0xff`` for server
refusals and 2 for usage errors):

=========================================  ==============================================
bad input                                  message, exit
=========================================  ==============================================
unknown flag / missing argument            getopt line + qsub usage, 2
bad ``-l`` syntax / ``-J`` / ``-a`` / ...  ``qsub: illegal -l value`` (or -J, -a...), 2
bad resource value (``walltime=abc``)      ``qsub: Illegal attribute or resource value
                                           Resource_List.walltime``, 166 (PBSE_BADATVAL)
bad dependency (``-W depend=...``)         ``qsub: illegal -W value`` + reason, 2
missing script                             ``qsub: script file:: No such file or
                                           directory``, 1
=========================================  ==============================================
"""

from __future__ import annotations

import datetime as dt
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from corral.core.model.job import DependencySpec, JobSpec
from corral.core.parse.arrayspec import parse_array
from corral.core.parse.dependency import parse_dependency
from corral.core.parse.errors import ParseError
from corral.frontends.container_options import HANDLERS as CONTAINER_HANDLERS
from corral.frontends.container_options import ContainerDraft
from corral.frontends.container_options import finish as finish_container
from corral.frontends.context import SubmitContext
from corral.frontends.directives import DirectiveError, directive_words
from corral.frontends.errors import SubmitError
from corral.frontends.getopt import Arg, GetoptError, Opt, OptionTable, Parsed, getopt_long
from corral.frontends.pbs_resources import ResourceError, resources_to_shape, split_resource_list
from corral.submission import JobSubmission

PBSE_BADATVAL_EXIT = 15014 & 0xFF  # 166

USAGE = """usage: qsub [-a date_time] [-A account_string] [-c interval]
        [-C directive_prefix] [-e path] [-f ] [-h ] [-I [-X]] [-j oe|eo] [-J X-Y[:Z]]
        [-k o|e|oe] [-l resource_list] [-m mail_options] [-M user_list]
        [-N jobname] [-o path] [-p priority] [-P project] [-q queue] [-r y|n]
        [-S path] [-u user_list] [-W otherattributes=value...]
        [-v variable_list] [-V ] [-z] [script | -- command [arg1 ...]]
       qsub --version"""

_WITH_ARG = "aAcCdeijJklmMNopPqrRSTtuvwW"
_NO_ARG = "fGhIVXz"
QSUB_TABLE = OptionTable.of(
    [Opt(ch, (), ch, Arg.REQUIRED) for ch in _WITH_ARG]
    + [Opt(ch, (), ch, Arg.NONE) for ch in _NO_ARG]
    + [Opt("version", ("version",), None, Arg.NONE)]
)
PBS_O_VARS = ("HOME", "LANG", "LOGNAME", "PATH", "MAIL", "SHELL", "TZ")


@dataclass
class PbsOptions:
    """Merged qsub options; ``None``: not given."""

    name: str | None = None
    queue: str | None = None
    account: str | None = None
    project: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    join: str | None = None  # "oe", "eo" or "n"
    resources: dict[str, str] = field(default_factory=dict)
    attributes: dict[str, str] = field(default_factory=dict)  # -W name=value
    array: str | None = None
    export_all: bool = False
    variables: dict[str, str | None] = field(default_factory=dict)  # -v (None: take from env)
    hold: bool = False
    begin_time: float | None = None
    rerunnable: bool | None = None
    priority: int | None = None
    shell: str | None = None
    workdir: str | None = None  # Torque -d / -w
    prefix: str | None = None  # -C
    quiet: bool = False  # -z
    interactive: bool = False  # -I
    version: bool = False
    extra: dict[str, str] = field(default_factory=dict)


def _illegal(flag: str, detail: str = "") -> SubmitError:
    tail = f": {detail}" if detail else ""
    return SubmitError(f"qsub: illegal -{flag} value{tail}\n{USAGE}", 2)


def _split_vars(text: str) -> dict[str, str | None]:
    """``-v A,B=1,C="x,y"`` -> ``{"A": None, "B": "1", "C": "x,y"}``."""
    out: dict[str, str | None] = {}
    cur: list[str] = []
    quote: str | None = None
    items: list[str] = []
    for ch in text:
        if quote:
            if ch == quote:
                quote = None
            else:
                cur.append(ch)
        elif ch in "\"'":
            quote = ch
        elif ch == ",":
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if quote:
        raise ValueError("unmatched quote")
    items.append("".join(cur))
    for item in items:
        item = item.strip()
        if not item:
            continue
        name, eq, value = item.partition("=")
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise ValueError(f"{name!r} is not a variable name")
        out[name] = value if eq else None
    return out


def parse_pbs_datetime(text: str, now: float) -> float:
    """``-a [[[[CC]YY]MM]DD]hhmm[.SS]`` in local time; a past time without a day means
    tomorrow (without a month: next month; without a year: next year)."""
    main, dot, secs_s = text.strip().partition(".")
    if not main.isdigit() or len(main) not in (4, 6, 8, 10, 12):
        raise ValueError("expected [[[[CC]YY]MM]DD]hhmm[.SS]")
    if dot and (not secs_s.isdigit() or len(secs_s) != 2):
        raise ValueError("seconds must be two digits")
    base = dt.datetime.fromtimestamp(now).astimezone()
    digits = main
    hh, mm = int(digits[-4:-2]), int(digits[-2:])
    ss = int(secs_s) if dot else 0
    year, month, day = base.year, base.month, base.day
    rest = digits[:-4]
    given = len(rest)
    if given >= 2:
        day = int(rest[-2:])
    if given >= 4:
        month = int(rest[-4:-2])
    if given == 6:
        year = 2000 + int(rest[:2])
    if given == 8:
        year = int(rest[:4])
    try:
        when = base.replace(year=year, month=month, day=day, hour=hh, minute=mm, second=ss,
                            microsecond=0)
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    if when.timestamp() < now:
        if given == 0:
            when += dt.timedelta(days=1)
        elif given == 2:
            month = when.month % 12 + 1
            year = when.year + (1 if month == 1 else 0)
            when = when.replace(year=year, month=month)
        elif given == 4:
            when = when.replace(year=when.year + 1)
    return when.timestamp()


def _pbs_dependency(value: str) -> DependencySpec:
    """``afterok:12.server:13,afterany:14`` -> the model's dependency (ids lose the server)."""
    conds: list[str] = []
    for cond in value.split(","):
        kind, colon, ids = cond.strip().partition(":")
        kind = kind.lower()
        if kind in ("before", "beforeok", "beforenotok", "beforeany", "on", "runone"):
            raise ValueError(f"dependency type {kind!r} is not supported by Corral")
        if not colon or not ids:
            raise ValueError(f"{cond!r} needs type:jobid")
        refs = []
        for ref in ids.split(":"):
            num = ref.split(".", 1)[0].replace("[]", "")
            m = re.match(r"^(\d+)\[(\d+)\]$", num)
            refs.append(f"{m.group(1)}_{m.group(2)}" if m else num)
        conds.append(f"{kind}:{':'.join(refs)}")
    try:
        return parse_dependency(",".join(conds))
    except ParseError as exc:
        raise ValueError(exc.reason) from None


def _apply(o: PbsOptions, parsed: Sequence[Parsed], ctx: SubmitContext) -> None:
    for p in parsed:
        k, v = p.opt.key, p.value or ""
        if k == "N":
            if not v or any(c.isspace() for c in v) or len(v) > 236:
                raise _illegal("N")
            o.name = v
        elif k == "q":
            o.queue = v.split("@", 1)[0] or None
        elif k == "A":
            o.account = v or None
        elif k == "P":
            o.project = v or None
        elif k in ("o", "e"):
            if k == "o":
                o.stdout = v
            else:
                o.stderr = v
        elif k == "j":
            if v.lower() not in ("oe", "eo", "n", "o", "e"):
                raise _illegal("j", f"{v!r}: expected oe, eo or n")
            o.join = v.lower()
        elif k == "l":
            try:
                o.resources.update(split_resource_list(v))
            except ValueError as exc:
                raise _illegal("l", str(exc)) from None
        elif k == "W":
            try:
                items = split_resource_list(v, join_bare=True)
            except ValueError:
                raise _illegal("W") from None
            for name, value in items:
                if name == "depend":
                    try:
                        _pbs_dependency(value)
                    except ValueError as exc:
                        raise _illegal("W", f"bad dependency {value!r}: {exc}") from None
                o.attributes[name] = value
        elif k in ("J", "t"):
            try:
                spec = parse_array(v)
            except ParseError as exc:
                raise _illegal(k, exc.reason) from None
            if k == "J" and ("-" not in v.split("%")[0] or "," in v):
                raise _illegal("J", "expected X-Y[:Z][%max]")
            del spec
            o.array = v.strip()
        elif k == "V":
            o.export_all = True
        elif k == "v":
            try:
                o.variables.update(_split_vars(v))
            except ValueError as exc:
                raise _illegal("v", str(exc)) from None
        elif k == "h":
            o.hold = True
        elif k == "a":
            try:
                o.begin_time = parse_pbs_datetime(v, ctx.now)
            except ValueError as exc:
                raise _illegal("a", f"{v!r}: {exc}") from None
        elif k == "r":
            if v.lower() not in ("y", "n"):
                raise _illegal("r", f"{v!r}: expected y or n")
            o.rerunnable = v.lower() == "y"
        elif k == "p":
            if not re.match(r"^[+-]?\d+$", v) or not -1024 <= int(v) <= 1023:
                raise _illegal("p", f"{v!r}: expected a whole number from -1024 to 1023")
            o.priority = int(v)
        elif k == "m":
            if not v or (v != "n" and set(v) - set("abej")):
                raise _illegal("m", f"{v!r}: expected n or letters from a, b, e, j")
            o.extra["mail_points"] = v
        elif k == "S":
            o.shell = v.split("@", 1)[0]
        elif k in ("d", "w"):
            o.workdir = ctx.abspath(v)
        elif k == "C":
            o.prefix = v
        elif k == "z":
            o.quiet = True
        elif k == "I":
            o.interactive = True
        elif k == "version":
            o.version = True
        else:  # c f G k M R T u X: accepted, recorded
            o.extra[f"pbs_{k}"] = v or "set"


def _path(ctx: SubmitContext, text: str, suffix: str) -> str:
    """``[host:]path``; a directory (a trailing ``/``, or one that exists) gets ``<id>.OU``."""
    head, colon, tail = text.partition(":")
    if colon and "/" not in head:
        text = tail
    full = ctx.abspath(text) if text else ctx.cwd
    if text.endswith("/") or not text or (ctx.is_dir is not None and ctx.is_dir(full)):
        return posixpath.join(full, f"%j.{suffix}")
    return full


@dataclass(frozen=True)
class QsubRequest:
    submission: JobSubmission
    options: PbsOptions
    script_path: str | None


def _qsub_prog(ctx: SubmitContext) -> SubmitContext:
    return ctx if ctx.prog == "qsub" else replace(ctx, prog="qsub")


def parse_qsub(argv: Sequence[str], ctx: SubmitContext) -> QsubRequest:
    """Parse a ``qsub`` call (flags, script or ``-- command``, ``#PBS`` directives)."""
    ctx = _qsub_prog(ctx)
    try:
        cli, positional = getopt_long(argv, QSUB_TABLE, "qsub")
    except GetoptError as exc:
        raise SubmitError(f"{exc.message}\n{USAGE}", 2) from None
    opts = PbsOptions()
    cli_opts = PbsOptions()
    _apply(cli_opts, cli, ctx)  # validates the command line first, as qsub does
    if cli_opts.version:
        return QsubRequest(JobSubmission(spec=JobSpec(), workdir=ctx.cwd), cli_opts, None)
    if cli_opts.interactive:
        raise SubmitError("qsub: interactive jobs (-I) are not supported by Corral; "
                          "use srun or salloc", 2)

    command_mode = bool(positional) and len(argv) > len(positional) and \
        argv[len(argv) - len(positional) - 1] == "--"
    script_path: str | None = None
    script: str | None = None
    command: tuple[str, ...] = ()
    if command_mode:
        command = tuple(positional)
    else:
        if len(positional) > 1:
            raise SubmitError(f"qsub: script arguments are not allowed: {positional[1]}\n"
                              f"{USAGE}", 2)
        if positional:
            script_path = positional[0]
            if ctx.read_file is None:
                raise SubmitError("qsub: script file:: No such file or directory", 1)
            try:
                script = ctx.read_file(script_path)
            except IsADirectoryError:
                raise SubmitError("qsub: script not a file", 1) from None
            except OSError:
                raise SubmitError("qsub: script file:: No such file or directory", 1) from None
        else:
            if ctx.read_stdin is None:
                raise SubmitError("qsub: no script on standard input", 1)
            script = ctx.read_stdin()
        prefix = cli_opts.prefix if cli_opts.prefix is not None else ctx.env.get(
            "PBS_DPREFIX", "#PBS")
        if prefix:
            words: list[str] = []
            try:
                words = directive_words(script, (prefix,))
                parsed, rest = getopt_long(words, QSUB_TABLE, "qsub", stop_at_positional=False)
            except (DirectiveError, GetoptError) as exc:
                msg = exc.message if isinstance(exc, GetoptError) else str(exc)
                raise SubmitError(f"{msg}\nqsub: directive error: {' '.join(words)}", 2) \
                    from None
            if rest:
                raise SubmitError(f"qsub: directive error: {rest[0]}", 2)
            _apply(opts, parsed, ctx)
    _apply(opts, cli, ctx)
    default_name = "STDIN" if script_path in (None, "-", "/dev/stdin") and not command \
        else posixpath.basename(script_path or command[0])
    sub = build_pbs_submission(opts, ctx, script=script, argv=command,
                               default_name=default_name)
    if script_path:
        sub.extra["script_path"] = ctx.abspath(script_path)
    return QsubRequest(sub, opts, script_path)


def _container(opts: PbsOptions, ctx: SubmitContext, extra: dict[str, str]) -> None:
    """``-l container_image=REF`` (and ``container_mounts``, ``container_workdir``), or
    PBS Professional's container-hook convention ``-v CONTAINER_IMAGE=REF``: the job runs
    in that image (``corral.frontends.container_options``)."""
    image = extra.pop("pbs_l_container_image", None)
    if image is None:
        image = opts.variables.get("CONTAINER_IMAGE") or None
    mounts = extra.pop("pbs_l_container_mounts", None)
    workdir = extra.pop("pbs_l_container_workdir", None)
    if image is None and mounts is None and workdir is None:
        return
    draft = ContainerDraft()
    for key, value in (("container_image", image), ("container_mounts", mounts),
                       ("container_workdir", workdir)):
        if value is None:
            continue
        try:
            CONTAINER_HANDLERS[key](draft, _pbs_mounts(value) if key == "container_mounts"
                                    else value, ctx)
        except SubmitError as exc:
            why = str(exc).split("error: ", 1)[-1]
            raise SubmitError(f"qsub: Illegal attribute or resource value "
                              f"Resource_List.{key}\nqsub: {why}", PBSE_BADATVAL_EXIT) from None
    try:
        finish_container(draft, ctx, extra)
    except SubmitError as exc:
        why = str(exc).split("error: ", 1)[-1]
        raise SubmitError(f"qsub: {why}", 2) from None


def _pbs_mounts(value: str) -> str:
    """``-l container_mounts=/a:/b:ro+nosuid+/c``: commas separate ``-l`` resources, so
    mounts are joined by ``+``; a word without ``/`` or ``:`` is one more flag of the
    mount before it. Returns pyxis's comma form."""
    items: list[str] = []
    for word in value.split("+"):
        if items and "/" not in word and ":" not in word:
            items[-1] += "+" + word
        else:
            items.append(word)
    return ",".join(items)


def _bad_value(resource: str) -> SubmitError:
    name = resource if resource in ("depend",) else f"Resource_List.{resource}"
    return SubmitError(f"qsub: Illegal attribute or resource value {name}", PBSE_BADATVAL_EXIT)


def build_pbs_submission(
    opts: PbsOptions,
    ctx: SubmitContext,
    *,
    script: str | None,
    argv: Sequence[str] = (),
    default_name: str = "STDIN",
) -> JobSubmission:
    try:
        shape = resources_to_shape(opts.resources)
    except ResourceError as exc:
        raise _bad_value(exc.resource) from None
    extra: dict[str, str] = dict(opts.extra)
    extra.update(shape.extra)
    _container(opts, ctx, extra)
    dependency = None
    for name, value in opts.attributes.items():
        if name == "depend":
            try:
                dependency = _pbs_dependency(value)
            except ValueError:
                raise _bad_value("depend") from None
        else:
            extra[f"pbs_W_{name}"] = value
    if opts.project:
        extra["project"] = opts.project
    if opts.priority is not None:
        extra["pbs_priority"] = str(opts.priority)
    if opts.shell:
        extra["shell"] = opts.shell

    env: dict[str, str] = dict(ctx.env) if opts.export_all else {}
    for var_name, var_value in opts.variables.items():
        if var_value is not None:
            env[var_name] = var_value
        elif var_name in ctx.env:
            env[var_name] = ctx.env[var_name]
    for var in PBS_O_VARS:
        if var in ctx.env:
            env[f"PBS_O_{var}"] = ctx.env[var]
    env["PBS_O_WORKDIR"] = ctx.cwd
    if ctx.host:
        env["PBS_O_HOST"] = ctx.host
    if opts.queue:
        env["PBS_O_QUEUE"] = opts.queue
    extra["export"] = "ALL" if opts.export_all else "NONE"
    extra["submit_dir"] = ctx.cwd
    if ctx.host:
        extra["submit_host"] = ctx.host

    out = _path(ctx, opts.stdout, "OU") if opts.stdout is not None else \
        posixpath.join(ctx.cwd, "%x.o%j")
    err = _path(ctx, opts.stderr, "ER") if opts.stderr is not None else \
        posixpath.join(ctx.cwd, "%x.e%j")
    stdout: str | None = out
    stderr: str | None = err
    if opts.join in ("oe", "o"):
        stderr = None
    elif opts.join in ("eo", "e"):
        stdout, stderr = err, None

    features = sorted(set(shape.features))
    spec = JobSpec(
        name=opts.name or default_name,
        user=ctx.user,
        uid=ctx.uid,
        gid=ctx.gid,
        account=opts.account or opts.project,
        partitions=(opts.queue,) if opts.queue else (),
        nodes_min=shape.nodes_min or 1,
        nodes_max=shape.nodes_max,
        ntasks=shape.ntasks,
        ntasks_per_node=shape.ntasks_per_node,
        cpus_per_task=shape.cpus_per_task or 1,
        mem_per_node_mb=shape.mem_per_node_mb,
        mem_per_cpu_mb=shape.mem_per_cpu_mb if shape.mem_per_node_mb is None else None,
        gpus=shape.gpus,
        gpus_per_node=shape.gpus_per_node,
        gpus_per_task=shape.gpus_per_task,
        gpu_type=shape.gpu_type,
        time_limit_s=shape.time_limit_s,
        constraint="&".join(features) or None,
        exclusive=shape.exclusive,
        nodelist=tuple(shape.hosts),
        task_groups=shape.task_groups,
        dependency=dependency,
        begin_time=opts.begin_time,
        requeue=True if opts.rerunnable is None else opts.rerunnable,
    )
    home = ctx.env.get("HOME") or ctx.cwd
    return JobSubmission(
        spec=spec,
        script=script,
        argv=tuple(argv),
        workdir=opts.workdir or home,
        env=env,
        stdout=stdout,
        stderr=stderr,
        array=opts.array,
        open_mode="truncate",
        hold=opts.hold,
        dialect="pbs",
        extra=extra,
    )
