"""``sacctmgr``: accounts, users and QOS at run time (``corral.controller.livecfg``).

Verbs: ``add|create``, ``modify|update`` (``... [where] name=X set K=V``), ``delete|remove``,
``show|list`` of ``account``, ``user``, ``qos`` and ``association`` (show only), with
``-i``/``--immediate`` (Corral commits at once either way: no 30-second prompt),
``-s``/``--associations`` (``show user``: one row per association, user columns first),
``-n``/``--noheader``, ``-P``/``--parsable2``, ``-p``/``--parsable`` and ``format=``.
Keys (case-insensitive) and what they set in the ``corral.toml`` entry:

- account: ``Parent``, ``Fairshare``/``Shares``, ``GrpJobs``, ``GrpTRES`` (``cpu=``,
  ``mem=``, ``gres/gpu=``), ``MaxJobs`` (per user), ``MaxTRES`` (per job), ``MaxWall``,
  ``MaxNodes``; ``Description``/``Organization`` are accepted and not kept;
- user: ``Account``/``Accounts`` (associations: added to, or with ``delete user U
  account=A`` removed from), ``DefaultAccount``, ``Fairshare``/``Shares``;
- qos: ``Priority``, ``Preempt``, ``PreemptMode``, ``GraceTime``, ``UsageFactor``,
  ``MaxWall``, ``MaxJobsPerUser``/``MaxJobsPU``, ``MaxSubmitJobsPerUser``/``MaxSubmitPU``,
  ``MaxTRESPerUser``/``MaxTRESPU``, ``MaxTRESPerJob``/``MaxTRES``, ``MaxNodes``,
  ``GrpJobs``, ``GrpTRES``.

Tables print as Slurm 22.05's: right-aligned columns of fixed widths with a trailing
space, ``+`` marking a cut value; ``-P`` joins with ``|``, ``-p`` adds a trailing ``|``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from corral.core.parse.timefmt import format_time_s
from corral.shims.context import Context

Entry = dict[str, Any]
Field = tuple[str, int, Callable[[Entry, dict[str, Any]], str]]

_ENTITIES = {"account": "accounts", "accounts": "accounts", "user": "users",
             "users": "users", "qos": "qos", "association": "assoc", "associations": "assoc",
             "assoc": "assoc"}
_VERBS = {"add": "add", "create": "add", "modify": "modify", "update": "modify",
          "delete": "delete", "remove": "delete", "show": "show", "list": "show"}
_BIG = 1 << 62


def run(ctx: Context, client: Any) -> None:
    flags: set[str] = set()
    words: list[str] = []
    argv: list[str] = []
    for a in ctx.argv:  # clustered short flags, as getopt takes them: -nP is -n -P
        if len(a) > 2 and a[0] == "-" and a[1] != "-" and all(ch in "inPpQvs" for ch in a[1:]):
            argv.extend(f"-{ch}" for ch in a[1:])
        else:
            argv.append(a)
    for a in argv:
        if a in ("-i", "--immediate"):
            flags.add("i")
        elif a in ("-s", "--associations"):
            flags.add("s")
        elif a in ("-n", "--noheader"):
            flags.add("n")
        elif a in ("-P", "--parsable2"):
            flags.add("P")
        elif a in ("-p", "--parsable"):
            flags.add("p")
        elif a in ("-V", "--version"):
            ctx.print("slurm 22.05.8")
            return
        elif a in ("-h", "--help", "--usage"):
            ctx.print("sacctmgr [<OPTION>] [<COMMAND>]")
            return
        elif a.startswith("-") and a not in ("-Q", "--quiet", "-v", "--verbose"):
            raise ctx.fail(f"sacctmgr: error: Unrecognized option: {a}")
        elif not a.startswith("-"):
            words.append(a)
    if len(words) < 2:
        raise ctx.fail("sacctmgr: error: no command given (interactive mode is not "
                       "supported by Corral's sacctmgr)")
    verb = _VERBS.get(words[0].lower())
    kind = _ENTITIES.get(words[1].lower())
    if verb is None:
        raise ctx.fail(f"Invalid command '{words[0]}'")
    if kind is None or (kind == "assoc" and verb != "show"):
        raise ctx.fail(f" Unknown option: {words[1]}")
    rest = words[2:]
    if verb == "show":
        _show(ctx, client, kind, rest, flags)
        return
    change = getattr(client, "admin_change", None)
    if change is None:
        raise ctx.fail("sacctmgr: error: changes are not available through this connection "
                       "to the controller")
    cfg = client.cluster_config()
    if verb == "add":
        _add(ctx, change, cfg, kind, rest)
    elif verb == "modify":
        _modify(ctx, change, cfg, kind, rest)
    else:
        _delete(ctx, change, cfg, kind, rest)


# ---- parsing -----------------------------------------------------------------------------

def _pairs(ctx: Context, words: list[str]) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """(names, where, set) of ``NAME... [where K=V...] [set K=V...]``."""
    names: list[str] = []
    where: dict[str, str] = {}
    sets: dict[str, str] = {}
    target = where
    for w in words:
        low = w.lower()
        if low == "where":
            target = where
            continue
        if low == "set":
            target = sets
            continue
        key, eq, value = w.partition("=")
        if not eq:
            names.extend(x for x in w.split(",") if x)
            continue
        target[key.lower()] = value
    if "name" in where:
        names.extend(x for x in where.pop("name").split(",") if x)
    for key in ("names",):
        if key in where:
            names.extend(x for x in where.pop(key).split(",") if x)
    return names, where, sets


def _tres(ctx: Context, value: str) -> dict[str, int | None]:
    """``cpu=4,mem=8G,gres/gpu=2`` -> cpus, mem_mb, gpus (``-1``: no limit)."""
    from corral.core.parse.errors import ParseError
    from corral.core.parse.memory import parse_mem_mb

    out: dict[str, int | None] = {}
    for item in (x.strip() for x in value.split(",") if x.strip()):
        k, _, v = item.partition("=")
        k = k.lower()
        if v == "-1":
            num: int | None = None
        elif k == "mem":
            try:
                num = parse_mem_mb(v)
            except ParseError:
                raise ctx.fail(f" Bad TRES value: {item}") from None
        elif v.isdigit():
            num = int(v)
        else:
            raise ctx.fail(f" Bad TRES value: {item}")
        key = {"cpu": "cpus", "mem": "mem", "gres/gpu": "gpus", "node": "nodes"}.get(k)
        if key is None:
            raise ctx.fail(f" Unknown TRES type: {k} (cpu, mem, gres/gpu, node)")
        out[key] = num
    return out


def _int(ctx: Context, key: str, value: str) -> int | None:
    if value == "-1":
        return None
    if not value.lstrip("-").isdigit():
        raise ctx.fail(f" Bad {key} value: {value}")
    return int(value)


def _wall(ctx: Context, value: str) -> int | None:
    from corral.core.parse.errors import ParseError
    from corral.core.parse.timefmt import parse_time_limit_s

    if value == "-1":
        return None
    try:
        return parse_time_limit_s(value)
    except ParseError:
        raise ctx.fail(f" Bad MaxWall time format: {value}") from None


def _fields(ctx: Context, kind: str, sets: dict[str, str]) -> dict[str, Any]:
    """The ``corral.toml`` fields (``limits`` as a partial object) of ``sets``."""
    out: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    for key, value in sets.items():
        if key in ("description", "organization", "cluster", "clusters"):
            continue
        if key in ("fairshare", "shares") and kind in ("accounts", "users"):
            out["shares"] = _int(ctx, key, value) or 1
        elif key == "parent" and kind == "accounts":
            out["parent"] = None if value == "root" else value
        elif key in ("account", "accounts") and kind == "users":
            out["accounts"] = [x for x in value.split(",") if x]
        elif key == "defaultaccount" and kind == "users":
            out["default_account"] = value
        elif key == "priority" and kind == "qos":
            out["priority"] = _int(ctx, key, value) or 0
        elif key == "preempt" and kind == "qos":
            out["preempt"] = [x for x in value.lstrip("=").split(",") if x]
        elif key == "preemptmode" and kind == "qos":
            out["preempt_mode"] = value.upper()
        elif key == "gracetime" and kind == "qos":
            out["grace_time_s"] = _wall(ctx, value) or 0
        elif key == "usagefactor" and kind == "qos":
            try:
                out["usage_factor"] = float(value)
            except ValueError:
                raise ctx.fail(f" Bad UsageFactor value: {value}") from None
        elif key == "maxwall" or (key == "maxwalldurationperjob"):
            limits["max_wall_s"] = _wall(ctx, value)
        elif key in ("maxnodes", "maxnodesperjob"):
            limits["max_nodes_per_job"] = _int(ctx, key, value)
        elif key in ("grpjobs",):
            limits["grp_jobs"] = _int(ctx, key, value)
        elif key in ("grptres",):
            t = _tres(ctx, value)
            for src, dst in (("cpus", "grp_cpus"), ("mem", "grp_mem_mb"), ("gpus", "grp_gpus")):
                if src in t:
                    limits[dst] = t[src]
        elif key in ("maxtres", "maxtresperjob"):
            t = _tres(ctx, value)
            for src, dst in (("cpus", "max_cpus_per_job"), ("gpus", "max_gpus_per_job"),
                             ("nodes", "max_nodes_per_job")):
                if src in t:
                    limits[dst] = t[src]
        elif key in ("maxjobs", "maxjobsperuser", "maxjobspu"):
            limits["max_jobs_per_user"] = _int(ctx, key, value)
        elif key in ("maxsubmitjobs", "maxsubmitjobsperuser", "maxsubmitpu", "maxsubmit"):
            limits["max_submit_per_user"] = _int(ctx, key, value)
        elif key in ("maxtresperuser", "maxtrespu"):
            t = _tres(ctx, value)
            for src, dst in (("cpus", "max_cpus_per_user"), ("mem", "max_mem_mb_per_user"),
                             ("gpus", "max_gpus_per_user")):
                if src in t:
                    limits[dst] = t[src]
        else:
            raise ctx.fail(f" Unknown option: {key}\n Use keyword 'where' to modify "
                           "condition")
    if limits:
        out["limits"] = limits
    return out


# ---- changes -----------------------------------------------------------------------------

def _do(ctx: Context, fn: Callable[..., Any], *args: Any) -> Any:
    from corral.client import CorralError

    try:
        return fn(*args)
    except CorralError as exc:
        raise ctx.fail(f" {exc.slurm or exc.message}") from None


def _kind_word(kind: str) -> str:
    return {"accounts": "Account", "users": "User", "qos": "QOS"}[kind]


def _add(ctx: Context, change: Any, cfg: dict[str, Any], kind: str, words: list[str]) -> None:
    names, where, sets = _pairs(ctx, words)
    sets = {**where, **sets}
    if not names:
        raise ctx.fail(f" Need name of {_kind_word(kind).lower()} to add.")
    fields = _fields(ctx, kind, sets)
    cluster = cfg.get("cluster_name", "corral")
    if kind == "users":
        accounts = fields.pop("accounts", [])
        known = {u["name"]: u for u in cfg.get("users") or ()}
        ctx.print(" Adding User(s)")
        for n in names:
            ctx.print(f"  {n}")
        ctx.print(" Associations =")
        for n in names:
            for a in accounts:
                ctx.print(f"  U = {n:<9} A = {a:<10} C = {cluster:<10}")
            if n in known:
                cur = known[n]
                merged = list(dict.fromkeys(list(cur.get("accounts") or ()) + accounts))
                _do(ctx, change, "users", n, {**fields, "accounts": merged}, "modify")
            else:
                if not accounts:
                    raise ctx.fail(" Need a default account for these users to add.")
                _do(ctx, change, "users", n, {**fields, "accounts": accounts}, "add")
        return
    ctx.print(f" Adding {_kind_word(kind)}(s)")
    for n in names:
        ctx.print(f"  {n}")
    for n in names:
        _do(ctx, change, kind, n, fields, "add")
    if kind == "accounts":
        ctx.print(" Associations")
        for n in names:
            ctx.print(f"  A = {n:<10} C = {cluster:<10}")


def _modify(ctx: Context, change: Any, cfg: dict[str, Any], kind: str,
            words: list[str]) -> None:
    names, where, sets = _pairs(ctx, words)
    if not sets:
        raise ctx.fail(" You didn't give me anything to set")
    if not names:
        raise ctx.fail(f" Need name of {_kind_word(kind).lower()} to modify "
                       "(where name=...)")
    fields = _fields(ctx, kind, sets)
    cluster = cfg.get("cluster_name", "corral")
    if kind == "qos":
        ctx.print(" Modified qos...")
    else:
        ctx.print(f" Modified {'account' if kind == 'accounts' else 'user'} associations...")
    for n in names:
        _do(ctx, change, kind, n, fields, "modify")
        if kind == "qos":
            ctx.print(f"  {n}")
        elif kind == "accounts":
            ctx.print(f"  C = {cluster:<10} A = {n:<10}")
        else:
            ctx.print(f"  C = {cluster:<10} U = {n:<10}")


def _delete(ctx: Context, change: Any, cfg: dict[str, Any], kind: str,
            words: list[str]) -> None:
    names, where, _sets = _pairs(ctx, words)
    if not names:
        raise ctx.fail(f" Need name of {_kind_word(kind).lower()} to delete.")
    cluster = cfg.get("cluster_name", "corral")
    if kind == "users" and ("account" in where or "accounts" in where):
        drop = set((where.get("account") or where.get("accounts") or "").split(","))
        known = {u["name"]: u for u in cfg.get("users") or ()}
        ctx.print(" Deleting user associations...")
        for n in names:
            cur = known.get(n)
            if cur is None:
                raise ctx.fail(" Nothing deleted")
            left = [a for a in cur.get("accounts") or () if a not in drop]
            for a in sorted(drop & set(cur.get("accounts") or ())):
                ctx.print(f"  C = {cluster:<10} A = {a:<10} U = {n:<10}")
            fields: dict[str, Any] = {"accounts": left}
            if cur.get("default_account") in drop:
                fields["default_account"] = left[0] if left else None
            if left:
                _do(ctx, change, "users", n, fields, "modify")
            else:
                _do(ctx, change, "users", n, None, "delete")
        return
    ctx.print({"accounts": " Deleting account(s)...", "users": " Deleting users...",
               "qos": " Deleting QOS(s)..."}[kind])
    for n in names:
        ctx.print(f"  {n}")
    for n in names:
        _do(ctx, change, kind, n, None, "delete")


# ---- show --------------------------------------------------------------------------------

def _tres_text(cpus: Any, mem: Any, gpus: Any, nodes: Any = None) -> str:
    parts = []
    for key, v in (("cpu", cpus), ("mem", mem), ("node", nodes), ("gres/gpu", gpus)):
        if v is not None and v < _BIG:
            parts.append(f"{key}={v}M" if key == "mem" else f"{key}={v}")
    return ",".join(parts)


def _lim(e: Entry, key: str) -> Any:
    return (e.get("limits") or {}).get(key)


def _num(v: Any) -> str:
    return "" if v is None else str(v)


def _wall_text(v: Any) -> str:
    return "" if v is None else format_time_s(v)


_QOS: list[Field] = [
    ("Name", 10, lambda e, c: e["name"]),
    ("Priority", 10, lambda e, c: str(e.get("priority", 0))),
    ("GraceTime", 10, lambda e, c: format_time_s(e.get("grace_time_s") or 0)),
    ("Preempt", 10, lambda e, c: ",".join(e.get("preempt") or ())),
    ("PreemptExemptTime", 19, lambda e, c: ""),
    ("PreemptMode", 11, lambda e, c: str(e.get("preempt_mode") or "cluster").lower()),
    ("Flags", 40, lambda e, c: ""),
    ("UsageThres", 10, lambda e, c: ""),
    ("UsageFactor", 11, lambda e, c: f"{float(e.get('usage_factor', 1.0)):.6f}"),
    ("GrpTRES", 13, lambda e, c: _tres_text(_lim(e, "grp_cpus"), _lim(e, "grp_mem_mb"),
                                            _lim(e, "grp_gpus"))),
    ("GrpTRESMins", 13, lambda e, c: ""),
    ("GrpTRESRunMin", 13, lambda e, c: ""),
    ("GrpJobs", 7, lambda e, c: _num(_lim(e, "grp_jobs"))),
    ("GrpSubmit", 9, lambda e, c: ""),
    ("GrpWall", 11, lambda e, c: ""),
    ("MaxTRES", 13, lambda e, c: _tres_text(_lim(e, "max_cpus_per_job"), None,
                                            _lim(e, "max_gpus_per_job"),
                                            _lim(e, "max_nodes_per_job"))),
    ("MaxTRESPerNode", 14, lambda e, c: ""),
    ("MaxTRESMins", 13, lambda e, c: ""),
    ("MaxWall", 11, lambda e, c: _wall_text(_lim(e, "max_wall_s"))),
    ("MaxTRESPU", 13, lambda e, c: _tres_text(_lim(e, "max_cpus_per_user"),
                                              _lim(e, "max_mem_mb_per_user"),
                                              _lim(e, "max_gpus_per_user"))),
    ("MaxJobsPU", 9, lambda e, c: _num(_lim(e, "max_jobs_per_user"))),
    ("MaxSubmitPU", 11, lambda e, c: _num(_lim(e, "max_submit_per_user"))),
    ("MaxTRESPA", 13, lambda e, c: _tres_text(_lim(e, "max_cpus_per_account"), None, None)),
    ("MaxJobsPA", 9, lambda e, c: _num(_lim(e, "max_jobs_per_account"))),
    ("MaxSubmitPA", 11, lambda e, c: ""),
    ("MinTRES", 13, lambda e, c: ""),
]
_ACCOUNT: list[Field] = [
    ("Account", 10, lambda e, c: e["name"]),
    ("Descr", 20, lambda e, c: e["name"]),
    ("Org", 20, lambda e, c: e.get("parent") or ("root" if e["name"] == "root" else "root")),
]
_USER: list[Field] = [
    ("User", 10, lambda e, c: e["name"]),
    ("Def Acct", 10, lambda e, c: e.get("default_account") or
     ((e.get("accounts") or [""])[0])),
    ("Admin", 9, lambda e, c: "Operator" if e.get("operator") or e["name"] in
     (c.get("operators") or ()) else "None"),
]
_ASSOC: list[Field] = [
    ("Cluster", 10, lambda e, c: c.get("cluster_name", "corral")),
    ("Account", 10, lambda e, c: e["account"]),
    ("User", 10, lambda e, c: e.get("user") or ""),
    ("Partition", 10, lambda e, c: ""),
    ("Share", 9, lambda e, c: str(e.get("shares", 1))),
    ("Priority", 10, lambda e, c: ""),
    ("GrpJobs", 7, lambda e, c: _num(_lim(e, "grp_jobs"))),
    ("GrpTRES", 13, lambda e, c: _tres_text(_lim(e, "grp_cpus"), _lim(e, "grp_mem_mb"),
                                            _lim(e, "grp_gpus"))),
    ("GrpSubmit", 9, lambda e, c: ""),
    ("GrpWall", 11, lambda e, c: ""),
    ("GrpTRESMins", 13, lambda e, c: ""),
    ("MaxJobs", 7, lambda e, c: _num(_lim(e, "max_jobs_per_user"))),
    ("MaxTRES", 13, lambda e, c: _tres_text(_lim(e, "max_cpus_per_job"), None,
                                            _lim(e, "max_gpus_per_job"))),
    ("MaxTRESPerNode", 14, lambda e, c: ""),
    ("MaxSubmit", 9, lambda e, c: _num(_lim(e, "max_submit_per_user"))),
    ("MaxWall", 11, lambda e, c: _wall_text(_lim(e, "max_wall_s"))),
    ("MaxTRESMins", 13, lambda e, c: ""),
    ("QOS", 20, lambda e, c: ",".join(q["name"] for q in c.get("qos") or ())),
    ("Def QOS", 9, lambda e, c: ""),
    ("GrpTRESRunMins", 13, lambda e, c: ""),
]
def _user_of(c: dict[str, Any], name: str) -> Entry:
    return next((u for u in c.get("users") or () if u["name"] == name),
                {"name": name, "accounts": ["root"], "operator": name == "root"})


_USER_ASSOC: list[Field] = [  # `sacctmgr -s show user`: the user, then its associations
    ("User", 10, lambda e, c: e.get("user") or ""),
    ("Def Acct", 10, lambda e, c: _USER[1][2](_user_of(c, e.get("user") or ""), c)),
    ("Admin", 9, lambda e, c: _USER[2][2](_user_of(c, e.get("user") or ""), c)),
] + [f for f in _ASSOC if f[0] != "User"]
_TABLES = {"qos": _QOS, "accounts": _ACCOUNT, "users": _USER, "assoc": _ASSOC}
_ALIASES = {"defaultaccount": "def acct", "defacct": "def acct", "adminlevel": "admin",
            "fairshare": "share", "descr": "descr", "description": "descr",
            "organization": "org", "defqos": "def qos"}


def _rows(kind: str, cfg: dict[str, Any]) -> list[Entry]:
    if kind != "assoc":
        rows: list[Entry] = list(cfg.get(kind) or ())
        if kind == "accounts":
            rows = [{"name": "root", "parent": None}] + rows
        if kind == "users":
            rows = [{"name": "root", "accounts": ["root"], "operator": True}] + \
                [u for u in rows if u["name"] != "root"]
        return rows
    out: list[Entry] = [{"account": "root", "user": "", "shares": 1}]
    for a in cfg.get("accounts") or ():
        out.append({"account": a["name"], "user": "", "shares": a.get("shares", 1),
                    "limits": a.get("limits")})
        for u in cfg.get("users") or ():
            if a["name"] in (u.get("accounts") or ()):
                out.append({"account": a["name"], "user": u["name"],
                            "shares": u.get("shares", 1)})
    return out


def _show(ctx: Context, client: Any, kind: str, words: list[str], flags: set[str]) -> None:
    cfg = client.cluster_config()
    names, where, _sets = _pairs(ctx, words)
    with_assoc = kind == "users" and "s" in flags  # `-s list user`: one row per association
    if with_assoc:
        kind = "assoc"
        where.setdefault("user", ",".join(names) if names else "")
        names = []
    fields = _USER_ASSOC if with_assoc else _TABLES[kind]
    fmt = where.pop("format", None)
    if fmt:
        chosen: list[Field] = []
        for item in (x.strip() for x in fmt.split(",") if x.strip()):
            name, _, width = item.partition("%")
            low = _ALIASES.get(name.lower(), name.lower())
            hit = next((f for f in fields if f[0].lower() == low), None)
            if hit is None:
                raise ctx.fail(f" Unknown field '{name}'")
            chosen.append((hit[0], int(width) if width.isdigit() else hit[1], hit[2]))
        fields = chosen
    rows = _rows(kind, cfg)
    key = "account" if kind == "assoc" else "name"
    if names:
        rows = [r for r in rows if r.get(key) in names or (kind == "assoc"
                                                          and r.get("user") in names)]
    for wkey in ("account", "accounts", "user", "users"):
        if wkey in where and kind == "assoc":
            want = set(x for x in where[wkey].split(",") if x)
            col = "account" if wkey.startswith("account") else "user"
            rows = [r for r in rows if r.get(col) in want or (not want and r.get(col))]
    parsable = "P" in flags or "p" in flags
    tail = "|" if "p" in flags else ""
    if "n" not in flags:
        if parsable:
            ctx.print("|".join(f[0] for f in fields) + tail)
        else:
            ctx.print(" ".join(f"{f[0]:>{f[1]}}"[-f[1]:] for f in fields) + " ")
            ctx.print(" ".join("-" * f[1] for f in fields) + " ")
    for r in rows:
        vals = [f[2](r, cfg) for f in fields]
        if parsable:
            ctx.print("|".join(vals) + tail)
        else:
            ctx.print(" ".join(_cell(v, f[1]) for v, f in zip(vals, fields, strict=True))
                      + " ")


def _cell(value: str, width: int) -> str:
    if len(value) > width:
        return value[: width - 1] + "+"
    return f"{value:>{width}}"
