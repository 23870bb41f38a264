"""``sshare``: fair-share shares, usage and factors per association, as Slurm 22.05 prints.

Data: the controller's association tree and decayed usage (``client.fairshare()``,
``corral.ops.schedview``); usage is in CPU-seconds, Slurm's ``RawUsage`` unit without
``TRESBillingWeights``.

Rows (as ``sshare``): ``root`` first, then depth-first each account's user associations
followed by its sub-accounts, names indented one space per level in the ``Account``
column. Without ``-a`` only the caller's user rows show (every account row does);
``-u a,b`` shows those users' rows; ``-A x,y`` only the associations of those accounts;
``-U`` only user rows (not indented: their parents are not shown; ``sshare -U --format
Account%256 --noheader`` is how snakemake's Slurm plugin finds a user's accounts).
Columns: ``Account User RawShares NormShares RawUsage EffectvUsage FairShare`` (``-l``
adds ``NormUsage``, ``LevelFS``, ``GrpTRESMins``, ``TRESRunMins``); ``-m`` adds
``Partition`` (always empty: no partition associations).
``FairShare`` is the Fair Tree factor of a user association and empty for accounts; with
``fairshare = "classic"`` every row shows the classic factor, as Slurm prints each.
Fields match Slurm's table order by prefix (``-o a,u,rawu``); numbers are never cut.

Options: ``-n``/``-h``/``--noheader``, ``-u -1`` (all users), ``-u`` uids,
``-p``/``--parsable``, ``-P``/``--parsable2``,
``-o``/``--format`` (``name%width``), ``-e``/``--helpformat``, ``-l``, ``-a``, ``-A``,
``-u``, ``-U``, ``-m``, ``-M`` (this cluster only), ``-v``, ``-V``; an unknown option or
field exits 1 with Slurm's message.
"""

from __future__ import annotations

import math
from typing import Any

from corral.frontends.getopt import Arg, GetoptError, Opt, OptionTable, getopt_long
from corral.shims.context import Context
from corral.shims.printfields import Column, FormatError, choose, render

R, N = Arg.REQUIRED, Arg.NONE
TABLE = OptionTable.of([
    Opt("accounts", ("accounts",), "A", R),
    Opt("all", ("all",), "a", N),
    Opt("clusters", ("clusters",), "M", R),
    Opt("helpformat", ("helpformat",), "e", N),
    Opt("help", ("help",), None, N),
    Opt("noheader_h", (), "h", N),  # sshare.c: -h is --noheader too
    Opt("quiet", (), "q", N),
    Opt("json", ("json",), None, N),
    Opt("long", ("long",), "l", N),
    Opt("partition", ("partition",), "m", N),
    Opt("noheader", ("noheader",), "n", N),
    Opt("format", ("format",), "o", R),
    Opt("parsable", ("parsable",), "p", N),
    Opt("parsable2", ("parsable2",), "P", N),
    Opt("usage", ("usage",), None, N),
    Opt("users", ("users",), "u", R),
    Opt("Users", ("Users",), "U", N),
    Opt("verbose", ("verbose",), "v", N),
    Opt("version", ("version",), "V", N),
    Opt("yaml", ("yaml",), None, N),
])
VERSION = "slurm 22.05.8"
USAGE = ("Usage:  sshare [-A Accounts] [-a] [-h] [-l] [-m] [-M Clusters] [-n] [-o format]\n"
         "               [-p] [-P] [-u Users] [-U] [-v] [-V]")
DEFAULT = "Account,User,RawShares,NormShares,RawUsage,EffectvUsage,FairShare"
LONG = ("Account,User,RawShares,NormShares,RawUsage,NormUsage,EffectvUsage,FairShare,"
        "LevelFS,GrpTRESMins,TRESRunMins")
TRES_KINDS = ("cpu", "mem", "energy", "node", "billing", "fs/disk", "vmem", "pages")


def _f6(v: Any) -> str:
    if v is None:
        return ""
    x = float(v)
    return "inf" if math.isinf(x) else f"{x:.6f}"


def _tres_run(r: dict[str, Any]) -> str:
    run = r.get("_run") or {}
    return ",".join(f"{k}={int(run.get(k, 0))}" for k in TRES_KINDS)


NUM = {"cut": False}  # Slurm prints numbers whole, wider than their column if need be
COLUMNS: list[Column] = [  # Slurm's table order: --format prefixes match the first
    Column("Account", -20, lambda r: " " * r["_depth"] + r["account"], ("account",)),
    Column("Cluster", 10, lambda r: r["_cluster"], ("cluster",)),
    Column("EffectvUsage", 13, lambda r: _f6(r["eff_usage"]), ("effectvusage",), **NUM),
    Column("FairShare", 10, lambda r: _f6(r.get("_fs")), ("fairshare",), **NUM),
    Column("LevelFS", 10, lambda r: "" if r.get("_root") else _f6(
        float("inf") if r.get("level_fs") is None else r["level_fs"]), ("levelfs",),
        **NUM),
    Column("ID", 6, lambda r: str(r.get("_id", "")), ("id",), **NUM),
    Column("NormShares", 11, lambda r: _f6(r["norm_shares"]), ("normshares",), **NUM),
    Column("NormUsage", 11, lambda r: _f6(r["eff_usage"]), ("normusage",), **NUM),
    Column("Partition", 12, lambda r: "", ("partition",)),
    Column("RawShares", 10, lambda r: "" if r.get("_root") else str(r["shares"]),
           ("rawshares",), **NUM),
    Column("RawUsage", 11, lambda r: str(int(float(r["raw_usage"]))), ("rawusage",), **NUM),
    Column("User", 10, lambda r: r["user"], ("user",)),
    Column("GrpTRESMins", 30, lambda r: "", ("grptresmins",)),
    Column("TRESRunMins", 30, _tres_run, ("tresrunmins",)),
]


def helpformat() -> str:
    """sshare.c's ``_help_format_msg``: four names a line, each ``%-17s``."""
    names = [c.name for c in COLUMNS]
    return "\n".join(" ".join(f"{n:<17}" for n in names[i:i + 4])
                     for i in range(0, len(names), 4))


def _split(values: list[str]) -> list[str]:
    out: list[str] = []
    for v in values:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def ordered(data: dict[str, Any]) -> list[dict[str, Any]]:
    """``root`` and the rows in sshare's order, each with ``_depth`` (and ``_fs``)."""
    rows = [dict(r) for r in data.get("rows") or ()]
    classic = data.get("algorithm") == "classic"
    children: dict[str, list[dict[str, Any]]] = {}
    for r in rows:  # Fair Tree: a user's rank factor, accounts empty; classic: everyone's
        if classic:
            r["_fs"] = r["fairshare"]
        elif r["user"]:
            r["_fs"] = r["fair_tree"] if r.get("fair_tree") is not None else r["fairshare"]
        children.setdefault(str(r["parent"]), []).append(r)
    total = sum(float(r["raw_usage"]) for r in children.get("root", ()))
    root = {"account": "root", "user": "", "parent": "", "shares": "", "_root": True,
            "norm_shares": 0.0, "raw_usage": total, "eff_usage": 1.0, "level_fs": None,
            "_depth": 0}
    out: list[dict[str, Any]] = [root]

    def visit(parent: str, depth: int) -> None:
        kids = children.get(parent, [])
        users = sorted((k for k in kids if k["user"]), key=lambda k: k["user"])
        accounts = sorted((k for k in kids if not k["user"]), key=lambda k: k["account"])
        for u in users:
            u["_depth"] = depth
            out.append(u)
        for a in accounts:
            a["_depth"] = depth
            out.append(a)
            visit(a["account"], depth + 1)

    visit("root", 1)
    for i, r in enumerate(out, 1):
        r["_id"] = i
    return out


def _running_tres(rows: list[dict[str, Any]], jobs: list[dict[str, Any]], now: float) -> None:
    """``TRESRunMins``: what running jobs still hold, CPU/memory/node-minutes of their
    remaining time limit, charged to their user association and every account above."""
    by_key = {(r["account"], r["user"]): r for r in rows}
    parent = {r["account"]: r["parent"] for r in rows if not r["user"]}
    for j in jobs:
        start = float(j.get("start_time") or now)
        limit = j.get("time_limit_s")
        left_min = max(0.0, (start + float(limit) - now) / 60.0) if limit else 0.0
        cpus = int(j.get("num_cpus") or 0)
        nodes = len(j.get("nodes") or ())
        mem = int(j.get("mem_per_node_mb") or 0) * nodes or \
            int(j.get("mem_per_cpu_mb") or 0) * cpus
        add = {"cpu": cpus * left_min, "mem": mem * left_min, "node": nodes * left_min,
               "billing": cpus * left_min}
        acct = str(j.get("account") or "")
        targets = [by_key.get((acct, str(j.get("user") or "")))]
        a: str | None = acct
        while a:
            targets.append(by_key.get((a, "")))
            a = parent.get(a)
        targets.append(rows[0])
        for t in targets:
            if t is not None:
                run = t.setdefault("_run", {})
                for k, v in add.items():
                    run[k] = run.get(k, 0.0) + v


def run(ctx: Context, client: Any) -> None:
    try:
        parsed, positional = getopt_long(ctx.argv, TABLE, "sshare", stop_at_positional=False)
    except GetoptError as exc:
        raise ctx.fail(f"{exc.message}\nTry \"sshare --help\" for more information") from None
    opts: dict[str, list[str]] = {}
    for p in parsed:
        opts.setdefault(p.opt.key, []).append(p.value or "")
    if positional:
        raise ctx.fail(f"sshare: error: Unknown argument: {positional[0]}\n{USAGE}")
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
        raise ctx.fail("sshare: error: --json/--yaml are not supported by Corral's sshare; "
                       "use `corral report fairshare --json`")
    data = client.fairshare()
    long_spec = LONG if data.get("algorithm") != "classic" else \
        LONG.replace("LevelFS,", "")  # process.c: classic -l has no LevelFS
    spec = ",".join(opts.get("format", [])) or (long_spec if "long" in opts else DEFAULT)
    if "partition" in opts and "format" not in opts:
        spec = spec.replace("User,", "User,Partition,", 1)
    try:
        cols = choose(COLUMNS, spec)
    except FormatError as exc:
        raise ctx.fail(f'sshare: error: Invalid field requested: "{exc.word}"') from None
    cfg = client.cluster_config()
    cluster = str(cfg.get("cluster_name") or "corral")
    for want in _split(opts.get("clusters", [])):
        if want.lower() not in (cluster.lower(), "all"):
            raise ctx.fail(f"sshare: error: Problem talking to the database: cluster "
                           f"'{want}' is not known (Corral's sshare reports this cluster "
                           "only)")
    rows = ordered(data)
    for r in rows:
        r["_cluster"] = cluster
        if "Users" in opts:  # no parents shown: nothing to indent under
            r["_depth"] = 0
    if any(c.name == "TRESRunMins" for c in cols):
        _running_tres(rows, client.jobs(states=["RUNNING"]), ctx.now)
    users: set[str] = set()
    for word in _split(opts.get("users", [])):
        if word.isdigit():  # a uid, as sshare takes it
            import pwd

            try:
                word = pwd.getpwuid(int(word)).pw_name
            except (KeyError, OverflowError):
                raise ctx.fail(f"Invalid user id: {word}") from None
        users.add(word)
    accounts = set(_split(opts.get("accounts", [])))
    all_users = "all" in opts or "-1" in opts.get("users", [])
    if not users and not all_users:
        users = {ctx.user}

    def keep(r: dict[str, Any]) -> bool:
        if accounts and r["account"] not in accounts:
            return False
        if r["user"]:
            return all_users or r["user"] in users
        return "Users" not in opts
    mode = "parsable2" if "parsable2" in opts else "parsable" if "parsable" in opts \
        else "fixed"
    header = "noheader" not in opts and "noheader_h" not in opts
    for line in render(cols, [r for r in rows if keep(r)], header=header,
                       mode=mode):
        ctx.print(line)
