"""``squeue``: the job queue in Slurm 22.05's formats.

Behaviour clients depend on (``shared/compat/clients.md`` §8.9, §11.5):

- without ``-t`` only PENDING, RUNNING, SUSPENDED and COMPLETING jobs show, also with
  ``-j``; ``-t all`` adds the recently finished ones the controller still keeps;
- ``-j <one id>`` for a job the controller does not know prints
  ``slurm_load_jobs error: Invalid job id specified`` and exits 1; with several ids
  unknown ones are just absent;
- ``-j`` takes an optional argument, so ``-j 12`` and ``--job '12,13'`` use the next word;
- pending tasks of an array that never ran show as one ``12_[3-6%2]`` row (``-r``: one
  row per task); sorting is Slurm's default ``P,t,-p`` (partition, state, priority).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from corral.frontends.getopt import Arg, GetoptError, Opt, OptionTable, getopt_long
from corral.shims import slurmfmt as sf
from corral.shims import squeue_fields as qf
from corral.shims.context import Client, Context
from corral.shims.ids import IdError, JobRef, parse_job_refs, ref_api_ids, ref_matches
from corral.shims.squeue_memo import MEMO
from corral.shims.users import UserError, resolve_users

R, N, OPT = Arg.REQUIRED, Arg.NONE, Arg.OPTIONAL
TABLE = OptionTable.of([
    Opt("account", ("account",), "A", R),
    Opt("all", ("all",), "a", N),
    Opt("array", ("array",), "r", N),
    Opt("array_unique", ("array-unique",), None, N),
    Opt("clusters", ("clusters", "cluster"), "M", R),
    Opt("federation", ("federation",), None, N),
    Opt("format", ("format",), "o", R),
    Opt("Format", ("Format",), "O", R),
    Opt("help", ("help",), None, N),
    Opt("hide", ("hide",), None, N),
    Opt("iterate", ("iterate",), "i", R),
    Opt("jobs", ("jobs",), "j", OPT),
    Opt("json", ("json",), None, N),
    Opt("licenses", ("licenses",), "L", R),
    Opt("local", ("local",), None, N),
    Opt("long", ("long",), "l", N),
    Opt("me", ("me",), None, N),
    Opt("name", ("name",), "n", R),
    Opt("noconvert", ("noconvert",), None, N),
    Opt("noheader", ("noheader",), "h", N),
    Opt("nodelist", ("nodelist",), "w", R),
    Opt("only_job_state", ("only-job-state",), None, N),
    Opt("partition", ("partition",), "p", R),
    Opt("priority", ("priority",), "P", N),
    Opt("qos", ("qos",), "q", R),
    Opt("reservation", ("reservation",), "R", R),
    Opt("sibling", ("sibling",), None, N),
    Opt("sort", ("sort",), "S", R),
    Opt("start", ("start",), None, N),
    Opt("states", ("states",), "t", R),
    Opt("steps", ("steps",), "s", OPT),
    Opt("usage", ("usage",), None, N),
    Opt("user", ("user",), "u", R),
    Opt("verbose", ("verbose",), "v", N),
    Opt("version", ("version",), "V", N),
    Opt("yaml", ("yaml",), None, N),
])

ACTIVE_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING"})
VALID_STATES = (
    "PENDING RUNNING SUSPENDED COMPLETED CANCELLED FAILED TIMEOUT NODE_FAIL PREEMPTED "
    "BOOT_FAIL DEADLINE OUT_OF_MEMORY COMPLETING CONFIGURING RESIZING RESV_DEL_HOLD "
    "REQUEUED REQUEUE_FED REQUEUE_HOLD REVOKED SIGNALING SPECIAL_EXIT STAGE_OUT STOPPED"
).split()
START_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.19S %.6D %20Y %R"
USAGE = (
    "Usage: squeue [-A account] [--clusters names] [-i seconds] [--job jobid]\n"
    "              [-n name] [-o format] [--only-job-state] [-p partitions]\n"
    "              [--qos qos] [--reservation reservation] [--sort fields] [--start]\n"
    "              [--step step_id] [-t states] [-u user_name] [--usage]\n"
    "              [-L licenses] [-w nodes] [--federation] [--local] [--sibling]\n"
    "              [-ahjlrsv]"
)
VERSION = "slurm 22.05.8"


def _split_list(values: list[str]) -> list[str]:
    out: list[str] = []
    for v in values:
        out.extend(x for x in v.split(",") if x)
    return out


def parse_states(ctx: Context, text: str) -> frozenset[str] | None:
    """``-t`` list: long or short names, any case, or ``all`` (returns None)."""
    states: set[str] = set()
    for word in _split_list([text]):
        up = word.upper()
        if up == "ALL":
            return None
        if up in sf.LONG_OF_SHORT:
            states.add(sf.LONG_OF_SHORT[up])
        elif up in VALID_STATES:
            states.add(up)
        else:
            raise ctx.fail(
                f"squeue: error: Invalid job state specified: {word}\n"
                f"squeue: error: Valid job states include: {','.join(VALID_STATES)}"
            )
    return frozenset(states)


def _sort_key_fn(spec: str) -> list[tuple[qf.Getter, bool, bool]]:
    keys: list[tuple[qf.Getter, bool, bool]] = []
    for word in spec.split(","):
        word = word.strip()
        if not word:
            continue
        desc = word.startswith("-")
        letter = word.lstrip("+-")[:1]
        field = qf.JOB_FIELDS.get(letter)
        if field is None:
            continue
        numeric = letter in "AFiCDpQUyGK"
        keys.append((field[1], desc, numeric))
    return keys


def _sorted(rows: list[dict[str, Any]], spec: str | None, now: float) -> list[dict[str, Any]]:
    if spec is None:
        short = sf.state_short
        rows.sort(key=lambda r: (str(r.get("partition") or ""), short(sf.shown_state(r)),
                                 -float(r.get("priority") or 0.0), int(r["id"])))
        return rows
    rows.sort(key=lambda r: int(r["id"]))
    for getter, desc, numeric in reversed(_sort_key_fn(spec)):
        if numeric:
            def key(r: dict[str, Any], g: qf.Getter = getter) -> Any:
                text = g(r, now).split("_")[0].strip("[]")
                try:
                    return float(text)
                except ValueError:
                    return 0.0
        else:
            def key(r: dict[str, Any], g: qf.Getter = getter) -> Any:
                return g(r, now)
        rows.sort(key=key, reverse=desc)
    return rows


def run(ctx: Context, client: Client) -> None:
    try:
        parsed, positional = getopt_long(ctx.argv, TABLE, "squeue", stop_at_positional=False)
    except GetoptError as exc:
        raise ctx.fail(f"{exc.message}\nTry \"squeue --help\" for more information") from None
    opts: dict[str, list[str | None]] = {}
    for p in parsed:
        opts.setdefault(p.opt.key, []).append(p.value)
    if "help" in opts or "usage" in opts:
        ctx.print(USAGE)
        return
    if "version" in opts:
        ctx.print(VERSION)
        return
    if "iterate" in opts:
        word = [v for v in opts["iterate"] if v is not None][-1:]
        secs = int(word[0]) if word and word[0].isascii() and word[0].isdigit() \
            and len(word[0]) < 7 else 0
        if secs < 1:
            raise ctx.fail(f"squeue: error: --iterate={word[0] if word else ''} "
                           "must be a positive number of seconds")
        if not ctx.local:  # the launchers run `squeue -i` in the caller's process
            raise ctx.fail("squeue: error: --iterate must run in the calling process "
                           "(a Corral launcher does so); run it in a loop instead")
        _iterate(ctx, client, opts, positional, secs)
        return
    _report(ctx, client, opts, positional)


def _iterate(ctx: Context, client: Client, opts: dict[str, list[str | None]],
             positional: list[str], secs: int) -> None:
    """``squeue -i N`` as Slurm: the report every N seconds, each after the date line
    (unless ``--noheader``) and followed by an empty line, until interrupted."""
    import sys

    while True:
        ctx.now = time.time()
        if "noheader" not in opts:
            ctx.print(time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(ctx.now)))
        _report(ctx, client, opts, list(positional), dated=True)
        ctx.print()
        sys.stdout.write(ctx.stdout_text)
        sys.stdout.flush()
        ctx.out.clear()
        try:
            time.sleep(secs)
        except KeyboardInterrupt:
            return


def _report(ctx: Context, client: Client, opts: dict[str, list[str | None]],
            positional: list[str], *, dated: bool = False) -> None:
    def values(key: str) -> list[str]:
        return [v for v in opts.get(key, []) if v is not None]

    job_words = _split_list(values("jobs"))
    if "jobs" in opts and not job_words and positional:
        job_words = _split_list(positional)
        positional = []
    if positional:
        raise ctx.fail(f"squeue: error: Unrecognized option: {positional[0]}\n{USAGE}")
    try:
        refs: list[JobRef] = parse_job_refs(job_words)
    except IdError as exc:
        raise ctx.fail(f"squeue: error: Invalid job id: {exc.word}") from None
    states = parse_states(ctx, values("states")[-1]) if "states" in opts else ACTIVE_STATES
    user_words = _split_list(values("user"))
    if "me" in opts:
        user_words.append(str(ctx.uid))
    try:
        users = resolve_users(user_words) if user_words else None
    except UserError as exc:
        raise ctx.fail(f"squeue: error: Invalid user: {exc.word}") from None
    partitions = set(_split_list(values("partition")))
    names = set(_split_list(values("name")))
    accounts = set(_split_list(values("account")))
    qos = set(_split_list(values("qos")))
    nodes_filter = _split_list(values("nodelist"))

    if refs:  # the controller resolves 12 (all tasks of array 12), 12_3 and plain ids
        api_ids = [i for ref in refs for i in ref_api_ids(ref)]
        rows = client.jobs(ids=api_ids, include_finished=True)
    else:
        # one user or one name: the controller answers from its index (no scan)
        one_user = _user_name(next(iter(users))) if users is not None and len(users) == 1 \
            else None
        one_name = next(iter(names)) if len(names) == 1 else None
        rows = client.jobs(user=one_user, name=one_name,
                           include_finished=states is None or not states <= ACTIVE_STATES)
    if len(refs) == 1 and not any(ref_matches(refs[0], r) for r in rows):
        raise ctx.fail("slurm_load_jobs error: Invalid job id specified")

    def keep(r: dict[str, Any]) -> bool:
        if refs and not any(ref_matches(ref, r) for ref in refs):
            return False
        # a CONFIGURING job is also a RUNNING one (Slurm matches the base state too)
        if states is not None and sf.job_state(r) not in states \
                and sf.shown_state(r) not in states:
            return False
        if users is not None and int(r.get("uid", -1)) not in users:
            return False
        if partitions and not (set(str(r.get("partition") or "").split(",")) & partitions):
            return False
        if names and r.get("name") not in names:
            return False
        if accounts and r.get("account") not in accounts:
            return False
        if qos and r.get("qos") not in qos:
            return False
        if nodes_filter and not set(r.get("nodes") or []) & _expand_nodes(nodes_filter):
            return False
        return True

    now = ctx.now
    sf.fill_default_partition(rows, client)
    sort_spec = values("sort")[-1] if "sort" in opts else None
    if "start" in opts:
        sort_spec = sort_spec or "S"
    items: list[qf.Item] | None = None
    if "steps" not in opts:
        fmt = values("format")[-1] if "format" in opts else None
        long_fmt = values("Format")[-1] if "Format" in opts else None
        try:
            if long_fmt is not None:
                items = qf.parse_long_format(long_fmt)
            else:
                if fmt is None:
                    fmt = ctx.env.get("SQUEUE_FORMAT") or (
                        START_FORMAT if "start" in opts
                        else qf.LONG_FORMAT if "long" in opts else qf.DEFAULT_FORMAT
                    )
                items = qf.parse_format(fmt)
        except qf.FormatError as exc:
            raise ctx.fail(f"squeue: error: {exc}") from None
        if "json" in opts or "yaml" in opts:
            raise ctx.fail("squeue: error: --json/--yaml are not supported by Corral's "
                           "squeue; use `corral queue --json`")
    line_of = qf.line_renderer(items) if items is not None else None
    # what each record gives, worked out once per record and view (``squeue_memo``): the
    # view is every option of the call (filters, order, -r, -h, --start, the format), the
    # users they resolved to and the format's getters; a string, hashed once, not per row
    view = repr(("squeue", sorted(opts.items()), sorted(users) if users is not None else None,
                 line_of.key if line_of is not None else None))
    short = sf.state_short

    def derive(r: dict[str, Any]) -> tuple[bool, Any, Any, str | None]:
        if not keep(r):
            return False, None, None, None
        group = sf.remainder_of(r)
        key = (str(r.get("partition") or ""), short(sf.shown_state(r)),
               -float(r.get("priority") or 0.0), int(r["id"])) if sort_spec is None else None
        line = line_of(r, now) if line_of is not None and not r.get("start_time") else None
        return True, group, key, line

    answer = MEMO.same_answer(rows, view) if "steps" not in opts else None
    if answer is not None:  # the very same records as the last such call: its answer
        if "long" in opts and "noheader" not in opts and not dated:
            ctx.print(time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now)))
        if answer:
            ctx.print(answer)
        return
    given = rows
    derived = MEMO.results(rows, view, derive)
    # parallel lists, no container per row: at 100,000 rows new tuples would cost full
    # garbage collections of the controller's heap, more than the work itself
    rows = [r for r, d in zip(rows, derived, strict=True) if d[0]]
    derived = [d for d in derived if d[0]]
    if "array" not in opts and any(d[1] is not None for d in derived):
        groups = {id(r): d[1] for r, d in zip(rows, derived, strict=True) if d[1] is not None}
        by_id = {id(r): d for r, d in zip(rows, derived, strict=True)}
        rows = sf.collapse_pending_arrays(rows, lambda r: groups.get(id(r)))
        derived = [by_id.get(id(r)) or derive(r) for r in rows]  # a remainder: a new record
    if "start" in opts:
        pending = [sf.is_pending(r) for r in rows]
        rows = [r for r, p in zip(rows, pending, strict=True) if p]
        derived = [d for d, p in zip(derived, pending, strict=True) if p]
    lines = [d[3] for d in derived]
    if sort_spec is None:  # the default order (partition, state, priority, id)
        keys = [d[2] for d in derived]
        order = sorted(range(len(rows)), key=keys.__getitem__)
        rows = [rows[i] for i in order]
        lines = [lines[i] for i in order]
    else:
        line_at = {id(r): line for r, line in zip(rows, lines, strict=True)}
        rows = _sorted(rows, sort_spec, now)
        lines = [line_at.get(id(r)) for r in rows]

    if "steps" in opts:
        _print_steps(ctx, client, rows, values, "noheader" not in opts)
        return
    assert items is not None and line_of is not None
    if "long" in opts and "noheader" not in opts and not dated:
        ctx.print(time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(now)))
    out: list[str] = []
    if "noheader" not in opts:
        out.append(line_of.header)
    timeless = True
    for r, line in zip(rows, lines, strict=True):
        if line is None:
            timeless = False
            line = line_of(r, now)
        out.append(line)
    text = "\n".join(out)
    if timeless:  # no line depends on the time: the same records give the same answer
        MEMO.keep_answer(given, view, text)
    if out:
        ctx.print(text)


def _print_steps(ctx: Context, client: Client, rows: list[dict[str, Any]],
                 values: Callable[[str], list[str]], header: bool) -> None:
    """``-s``/``--steps[=LIST]``: the running steps of the jobs left after the job filters."""
    from corral.shims import squeue_steps as ss

    try:
        wanted = ss.parse_step_list(_split_list(values("steps"))) or None
    except IdError as exc:
        raise ctx.fail(f"squeue: error: Invalid job step id: {exc.word}") from None
    running = [r for r in rows if sf.job_state(r) in ("RUNNING", "COMPLETING")]
    if wanted is not None:
        running = [r for r in running if any(ref_matches(ref, r) for ref in wanted)]
    ids = {int(r["id"]) for r in running}
    records = [rec for rec in client.history(ids=sorted(ids), all_users=True)
               if int(rec["id"]) in ids] if ids else []
    fmt = values("format")[-1] if values("format") else ss.STEP_FORMAT
    items = qf.parse_format(fmt, ss.STEP_FIELDS)
    for line in qf.render(items, ss.step_rows(records, wanted), ctx.now, header=header):
        ctx.print(line)


def _expand_nodes(words: list[str]) -> set[str]:
    from corral.core.parse.hostlist import expand

    out: set[str] = set()
    for w in words:
        out.update(expand(w))
    return out


def _user_name(uid: int) -> str | None:
    """The login name of ``uid`` (the controller indexes jobs by it), None if unknown."""
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None
