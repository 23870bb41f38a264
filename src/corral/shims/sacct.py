"""``sacct``: accounting records of jobs and their steps, in Slurm 22.05's formats.

What clients rely on (``clients.md`` §8.10, §9.1 rank 18, §11):

- ``-j`` is repeatable and takes comma lists (submitit sends one ``-j`` per job);
- a header line unless ``-n``; ``--parsable2`` joins with ``|`` and no trailing one;
- without ``-X`` each started batch job has a ``<id>.batch`` row, and ``srun`` steps
  ``<id>.<n>`` rows (the snakemake/submitit parsers skip rows with a ``.``);
- unknown positional arguments exit 1 (``sacct -X`` itself is Parsl's probe: exit 0);
- pending array tasks that never ran show as one ``12_[1-3%2]`` row (submitit's regex);
- ``-j 12.3`` / ``12.batch`` / ``12_4.1`` select steps as Slurm does (``sacct_select``):
  only those step rows, not the job's; a step the job does not have prints nothing;
- step rows show what the step used (``TotalCPU``, ``MaxRSS``/``MaxRSSNode``/
  ``MaxRSSTask``, ``AveRSS``, ``AveCPU``, ``MinCPU*``) from the controller's step record;
  ``--units`` and ``--noconvert`` change the memory units as in Slurm.

Time window (Slurm's defaults): with ``-j`` all time; otherwise from midnight today (or
``-S``) to now (or ``-E``); a job shows when its life overlaps the window.
"""

from __future__ import annotations

from typing import Any

from corral.frontends.getopt import Arg, GetoptError, Opt, OptionTable, getopt_long
from corral.shims import sacct_fields as sa
from corral.shims import slurmfmt as sf
from corral.shims.context import Client, Context
from corral.shims.ids import IdError, JobRef, RefIndex, ref_api_ids
from corral.shims.sacct_select import Selection, StepError, choose, parse_selections
from corral.shims.slurmtime import DateError, parse_date
from corral.shims.users import UserError, resolve_users

R, N, OPT = Arg.REQUIRED, Arg.NONE, Arg.OPTIONAL
TABLE = OptionTable.of([
    Opt("allusers", ("allusers",), "a", N),
    Opt("accounts", ("accounts",), "A", R),
    Opt("allocations", ("allocations",), "X", N),
    Opt("array", ("array",), None, N),
    Opt("brief", ("brief",), "b", N),
    Opt("batch_script", ("batch-script",), "B", N),
    Opt("completion", ("completion",), "c", N),
    Opt("constraints", ("constraints",), "C", R),
    Opt("delimiter", ("delimiter",), None, R),
    Opt("duplicates", ("duplicates",), "D", N),
    Opt("endtime", ("endtime",), "E", R),
    Opt("env_vars", ("env-vars",), None, N),
    Opt("file", ("file",), "f", R),
    Opt("federation", ("federation",), None, N),
    Opt("gid", ("gid", "group"), "g", R),
    Opt("help", ("help",), "h", N),
    Opt("helpformat", ("helpformat",), "e", N),
    Opt("hold_jobs", ("local",), None, N),
    Opt("jobs", ("jobs",), "j", R),
    Opt("json", ("json",), None, OPT),
    Opt("timelimit_min", ("timelimit-min",), "k", R),
    Opt("timelimit_max", ("timelimit-max",), "K", R),
    Opt("long", ("long",), "l", N),
    Opt("allclusters", ("allclusters",), "L", N),
    Opt("clusters", ("clusters", "cluster"), "M", R),
    Opt("nodelist", ("nodelist",), "N", R),
    Opt("noheader", ("noheader",), "n", N),
    Opt("name", ("name",), None, R),
    Opt("noconvert", ("noconvert",), None, N),
    Opt("format", ("format",), "o", R),
    Opt("parsable", ("parsable",), "p", N),
    Opt("parsable2", ("parsable2",), "P", N),
    Opt("qos", ("qos",), "q", R),
    Opt("partition", ("partition",), "r", R),
    Opt("reason", ("reason",), "R", R),
    Opt("state", ("state",), "s", R),
    Opt("starttime", ("starttime",), "S", R),
    Opt("truncate", ("truncate",), "T", N),
    Opt("units", ("units",), None, R),
    Opt("uid", ("uid", "user"), "u", R),
    Opt("usage", ("usage",), "U", N),
    Opt("use_local_uid", ("use-local-uid",), None, N),
    Opt("verbose", ("verbose",), "v", N),
    Opt("version", ("version",), "V", N),
    Opt("wckeys", ("wckeys",), "W", R),
    Opt("whole_hetjob", ("whole-hetjob",), None, OPT),
    Opt("associations", ("associations",), "x", R),
    Opt("yaml", ("yaml",), None, OPT),
])
VERSION = "slurm 22.05.8"
USAGE = "Usage: sacct [options]\n\tUse --help for help"


def _split(values: list[str]) -> list[str]:
    out: list[str] = []
    for v in values:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def _steps(rec: dict[str, Any], now: float) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    batch = sf.batch_step(rec)
    if batch is not None:
        out.append(batch)
    for st in rec.get("steps") or []:
        step = dict(st)
        step["id"] = str(st.get("step_id", st.get("id")))
        for key in ("usage", "cpu_time_s", "max_rss_mb"):
            step.setdefault(key, None)  # not measured: never the job's own figures
        out.append(step)
    return out


def helpformat() -> str:
    names = sorted((v[0] for v in sa.FIELDS.values()), key=str.lower)
    lines = []
    for i in range(0, len(names), 4):
        lines.append("".join(f"{n:<20}" for n in names[i:i + 4]).rstrip())
    return "\n".join(lines)


def run(ctx: Context, client: Client) -> None:
    try:
        parsed, positional = getopt_long(ctx.argv, TABLE, "sacct", stop_at_positional=False)
    except GetoptError as exc:
        raise ctx.fail(f"{exc.message}\nTry \"sacct --help\" for more information") from None
    opts: dict[str, list[str | None]] = {}
    for p in parsed:
        opts.setdefault(p.opt.key, []).append(p.value)

    def values(key: str) -> list[str]:
        return [v for v in opts.get(key, []) if v is not None]

    if positional:
        lines = "sacct: error: Unknown arguments:\n" + "\n".join(
            f"sacct: error:  {w}" for w in positional)
        raise ctx.fail(lines)
    if "help" in opts or "usage" in opts:
        ctx.print(USAGE)
        return
    if "version" in opts:
        ctx.print(VERSION)
        return
    if "helpformat" in opts:
        ctx.print(helpformat())
        return
    if "json" in opts or "yaml" in opts:
        raise ctx.fail("sacct: error: --json/--yaml are not supported by Corral's sacct; "
                       "use `corral history --json`")

    fields = ",".join(values("format")) or ctx.env.get("SACCT_FORMAT") or ""
    if not fields:
        fields = (sa.BRIEF_FIELDS if "brief" in opts
                  else sa.LONG_FIELDS if "long" in opts else sa.DEFAULT_FIELDS)
    try:
        cols = sa.parse_fields(fields)
    except sa.FieldError as exc:
        raise ctx.fail(f"sacct: error: {exc}") from None

    try:
        selections: list[Selection] = parse_selections(_split(values("jobs")))
    except IdError as exc:
        raise ctx.fail(f"sacct: error: Invalid job id specified: {exc.word}") from None
    except StepError as exc:
        raise ctx.fail(f"sacct: fatal: {exc}") from None
    refs: list[JobRef] = [sel.ref for sel in selections]
    ref_index = RefIndex(refs)
    units: int | None = None
    if "units" in opts:
        word = values("units")[-1]
        units = sf.unit_type(word)
        if units is None:
            raise ctx.fail(f"sacct: error: Invalid unit type '{word[:1]}'. Possible options "
                           "are 'KMGTP'\nsacct: fatal: Invalid unit type")
    now = ctx.now
    try:
        since = parse_date(values("starttime")[-1], now) if "starttime" in opts else None
        until = parse_date(values("endtime")[-1], now) if "endtime" in opts else None
    except DateError as exc:
        raise ctx.fail(f"sacct: error: {exc}") from None
    if since is None and not refs:
        since = parse_date("midnight", now)
    user_words = _split(values("uid"))
    try:
        users = resolve_users(user_words) if user_words else None
    except UserError as exc:
        raise ctx.fail(f"sacct: error: Invalid user id: {exc.word}") from None
    all_users = "allusers" in opts or ctx.uid == 0 or bool(refs)
    if users is None and not all_users:
        users = {ctx.uid}
    states: set[str] | None = None
    if "state" in opts:
        states = set()
        for w in _split(values("state")):
            up = w.upper()
            states.add(sf.LONG_OF_SHORT.get(up, up))

    api_ids: list[str] = []
    for ref in refs:
        api_ids.extend(ref_api_ids(ref))
    one_user = None  # one user's jobs: the database's (user, end_time) index
    if users is not None and len(users) == 1 and not api_ids:
        import pwd

        try:
            one_user = pwd.getpwuid(next(iter(users))).pw_name
        except KeyError:
            pass
    names = set(_split(values("name")))
    records = client.history(
        user=one_user, since=since, until=until, ids=api_ids or None, all_users=True,
        names=sorted(names) if names else None,
    )
    accounts = set(_split(values("accounts")))
    partitions = set(_split(values("partition")))
    qos = set(_split(values("qos")))

    def keep(r: dict[str, Any]) -> bool:
        if refs and not ref_index.names(r):
            return False
        if users is not None and int(r.get("uid", -1)) not in users:
            return False
        if states is not None and sf.job_state(r) not in states:
            return False
        if names and r.get("name") not in names:
            return False
        if accounts and r.get("account") not in accounts:
            return False
        if partitions and r.get("partition") not in partitions:
            return False
        if qos and (r.get("qos") or "normal") not in qos:
            return False
        if since is not None or until is not None:
            end = r.get("end_time")
            if until is not None and float(r.get("submit_time") or 0) > until:
                return False
            if since is not None and end is not None and float(end) < since:
                return False
        return True

    sf.fill_default_partition(records, client)
    kept = [r for r in records if keep(r)]
    kept.sort(key=lambda r: (sf.array_job_id(r), int(r.get("array_task_id") or 0),
                             int(r["id"])))
    kept = sf.collapse_pending_arrays(kept)
    faithful = ctx.env.get("CORRAL_SACCT_CANCELLED_BY", "") not in ("", "0")
    cluster = "corral"
    noconvert = "noconvert" in opts
    rows: list[sa.Row] = []
    for r in kept:
        if "allocations" in opts:
            rows.append(sa.Row(r, None, now, faithful, cluster, units, noconvert))
            continue
        show_job, wanted = choose(selections, r, ref_index)
        if show_job:
            rows.append(sa.Row(r, None, now, faithful, cluster, units, noconvert))
        for st in _steps(r, now):
            if wanted is None or st["id"] in wanted:
                rows.append(sa.Row(r, st, now, faithful, cluster, units, noconvert))
    mode = ("parsable2" if "parsable2" in opts else "parsable" if "parsable" in opts
            else "fixed")
    delimiter = values("delimiter")[-1] if "delimiter" in opts else "|"
    for line in sa.render(cols, rows, header="noheader" not in opts, mode=mode,
                          delimiter=delimiter):
        ctx.print(line)
