"""The reports of ``sreport`` (``corral.shims.sreport``): the window, the time units and
the rows and columns of ``cluster utilization``, ``cluster AccountUtilizationByUser``,
``cluster UserUtilizationByAccount`` and ``user topusage``, from the job history.

Every report charges a job its CPUs for each second of its run inside the window (the
``corral.ops.accounting`` rule); ``cluster utilization``'s Down, PLND Down and Reserved
come from the controller's node history (``_node_time``); column lengths are ``sreport``'s own
(``cluster_reports.c``, ``user_reports.c``), ``Used``/``Energy`` sized to the largest
value as ``sreport_set_usage_col_width`` does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from corral.shims.context import Context
from corral.shims.printfields import Column
from corral.shims.slurmtime import DateError, parse_date

Row = dict[str, Any]

# -t word -> (seconds per unit, percent?, value too?, what the banner says)
TIME_FORMATS: list[tuple[str, int, bool, bool, str]] = [
    ("seconds", 1, False, True, "CPU Seconds"),
    ("minutes", 60, False, True, "CPU Minutes"),
    ("hours", 3600, False, True, "CPU Hours"),
    ("percent", 1, True, False, "Percentage of Total"),
    ("secper", 1, True, True, "CPU Seconds/Percentage of Total"),
    ("minper", 60, True, True, "CPU Minutes/Percentage of Total"),
    ("hourper", 3600, True, True, "CPU Hours/Percentage of Total"),
]


class Units:
    def __init__(self, word: str) -> None:
        low = word.lower()
        hit = next((t for t in TIME_FORMATS if t[0].startswith(low) and low), None)
        if hit is None and low in ("s", "m", "h", "p"):
            hit = next(t for t in TIME_FORMATS if t[0][0] == low)
        if hit is None:
            raise ValueError(word)
        self.div, self.percent, self.value, self.label = hit[1], hit[2], hit[3], hit[4]

    @property
    def per(self) -> bool:
        """The value-and-percentage forms, which Slurm prints in wider columns."""
        return self.percent and self.value

    def w(self, plain: int, per: int) -> int:
        return per if self.per else plain

    def usage_width(self, max_secs: float) -> int:
        """Slurm's ``sreport_set_usage_col_width``: 8, one more for each power of ten
        from 10^8 seconds the largest usage reaches, 9 more for the ``*per`` forms."""
        width, order = 8, 10 ** 8
        while order < 10 ** 25 and max_secs >= order:
            width += 1
            order *= 10
        return width + (9 if self.per else 0)

    def text(self, secs: float, total: float) -> str:
        num = str(int(secs) // self.div)
        if not self.percent:
            return num
        pct = f"{100.0 * secs / total:.2f}%" if total > 0 else "0.00%"
        return f"{num}({pct})" if self.value else pct


def period(ctx: Context, kv: dict[str, str]) -> tuple[float, float]:
    now = ctx.now
    lt = time.localtime(now)
    today = time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, 0, 0, 0, 0, 0, -1))
    try:
        start = parse_date(kv["start"], now) if "start" in kv else today - 86400
        end = parse_date(kv["end"], now) if "end" in kv else today
    except DateError as exc:
        raise ctx.fail(f"sreport: error: {exc}") from None

    def hour(t: float) -> float:
        x = time.localtime(t)
        return time.mktime((x.tm_year, x.tm_mon, x.tm_mday, x.tm_hour, 0, 0, 0, 0, -1))

    start, end = hour(start), min(hour(end), now)  # live data: no wait for a rollup
    if end <= start:
        raise ctx.fail("sreport: error: The start time must be before the end time "
                       f"(start {when(start)}, end {when(end)})")
    return start, end


def when(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))


def _gecos(user: str) -> str:
    import pwd

    try:
        return pwd.getpwnam(user).pw_gecos.split(",")[0]
    except KeyError:
        return ""


def _charges(client: Any, start: float, end: float, now: float) -> list[tuple[str, str, float]]:
    """(user, account, CPU-seconds inside the window) of every job that ran in it."""
    from corral.ops.jobs import acct_jobs

    out = []
    for j in acct_jobs(client.history(all_users=True, since=start, until=end)):
        secs = j.cpus * j.overlap_s(start, end, now)
        if secs > 0:
            out.append((j.user, j.account or "", secs))
    return out


def _node_time(client: Any, start: float, end: float, now: float
               ) -> tuple[float, float, float]:
    """(Down, PLND Down, Reserved) CPU-seconds in the window from the controller's node
    history (``corral.controller.nodehistory``): nodes DOWN or DRAINED; maintenance
    reservations; other reservations, less what jobs on their nodes used meanwhile.
    Zeros from a controller that keeps no history."""
    from corral.client import CorralError
    from corral.core.parse.hostlist import expand
    from corral.ops.jobs import acct_jobs

    try:
        hist = client.node_history(start, end)
    except (AttributeError, CorralError):
        return 0.0, 0.0, 0.0
    down = sum(int(n["cpus"]) * (float(n["end"]) - float(n["start"]))
               for n in hist.get("nodes") or ())
    resvs = hist.get("reservations") or []
    pdown = reserved = 0.0
    if resvs:
        jobs = [(j, set(expand(j.nodelist)) if j.nodelist else set())
                for j in acct_jobs(client.history(all_users=True, since=start, until=end))]
        for r in resvs:
            lo, hi = float(r["start"]), float(r["end"])
            mine = set(r.get("nodes") or ())
            total = int(r.get("cpus") or 0) * (hi - lo)
            used = sum(j.cpus / max(1, len(nodes)) * len(nodes & mine) * j.overlap_s(lo, hi, now)
                       for j, nodes in jobs if nodes & mine)
            left = max(0.0, total - used)
            if r.get("maint"):
                pdown += left
            else:
                reserved += left
    return down, pdown, reserved


def _used(units: Units, total: float) -> Callable[[Row], str]:
    return lambda r: units.text(r["used"], total)


def cluster_util(ctx: Context, client: Any, cluster: str, units: Units, kv: dict[str, str],
                  start: float, end: float) -> tuple[list[str], list[Column], list[Row]]:
    cpus = sum(int(n.get("cpus") or 0) for n in client.nodes())
    reported = cpus * (end - start)
    alloc = sum(c[2] for c in _charges(client, start, end, ctx.now))
    alloc = min(alloc, reported)
    down, pdown, resv = _node_time(client, start, end, ctx.now)
    row = {"cluster": cluster, "alloc": alloc, "down": down, "pdown": pdown,
           "idle": max(0.0, reported - alloc - down - pdown - resv), "resv": resv,
           "over": 0.0, "reported": reported}

    def t(key: str) -> Callable[[Row], str]:
        return lambda r: units.text(r[key], reported)

    w = units.w  # Slurm's cluster_reports.c lengths (plain, *per forms)
    cols = [
        Column("Cluster", 9, lambda r: r["cluster"], ("cluster",), 2),
        Column("Allocated", w(12, 20), t("alloc"), ("allocated",), 2),
        Column("Down", w(10, 18), t("down"), ("down",), 1),
        Column("PLND Down", w(10, 18), t("pdown"), ("planneddown",), 2),
        Column("Idle", w(12, 20), t("idle"), ("idle",), 1),
        Column("Reserved", w(9, 18), t("resv"), ("reserved",), 3),
        Column("Reported", w(12, 20), t("reported"), ("reported",), 3),
        Column("Over Comm", w(9, 18), t("over"), ("overcommitted",), 1),
    ]
    banner = [f"Cluster Utilization {when(start)} - {when(end - 1)}"]
    return banner, cols, [row]


def _tree(cfg: dict[str, Any]) -> list[tuple[str, int]]:
    """(account, depth) for root and every configured account, in tree order."""
    kids: dict[str, list[str]] = {}
    for a in cfg.get("accounts") or ():
        kids.setdefault(a.get("parent") or "root", []).append(a["name"])
    out = [("root", 0)]

    def visit(name: str, depth: int) -> None:
        for k in sorted(kids.get(name, ())):
            out.append((k, depth))
            visit(k, depth + 1)
    visit("root", 1)
    return out


def _by_user_cols(cluster: str, units: Units, total: float, rows: list[Row], *,
                  account_first: bool, tree: bool = False) -> list[Column]:
    most = max((float(r["used"]) for r in rows), default=0.0)
    acct = Column("Account", -20 if tree else 15, lambda r: r["account_text"],
                  ("accounts",), 2)
    login = Column("Login", 9, lambda r: r["user"], ("login",), 1)
    proper = Column("Proper Name", 15, lambda r: r["proper"], ("propername",), 2)
    tail = [Column("Used", units.usage_width(most), _used(units, total), ("used",), 1),
            Column("Energy", units.usage_width(0), lambda r: units.text(0, total),
                   ("energy",), 1)]
    head = Column("Cluster", 9, lambda r: cluster, ("cluster",), 1)
    return [head, acct, login, proper] + tail if account_first else \
        [head, login, proper, acct] + tail


def account_by_user(ctx: Context, client: Any, cluster: str, units: Units,
                     kv: dict[str, str], start: float, end: float, tree_view: bool
                     ) -> tuple[list[str], list[Column], list[Row]]:
    cfg = client.cluster_config()
    parent = {a["name"]: a.get("parent") or "root" for a in cfg.get("accounts") or ()}
    order = _tree(cfg)
    depth = dict(order)
    acct_use: dict[str, float] = {}
    user_use: dict[tuple[str, str], float] = {}
    total = 0.0
    for user, account, secs in _charges(client, start, end, ctx.now):
        account = account or "root"
        if account not in depth:
            order.append((account, 1))
            depth[account] = 1
        total += secs
        user_use[(account, user)] = user_use.get((account, user), 0.0) + secs
        a: str | None = account
        while a and a != "root":
            acct_use[a] = acct_use.get(a, 0.0) + secs
            a = parent.get(a)
    acct_use["root"] = total
    users_of: dict[str, set[str]] = {}
    for u in cfg.get("users") or ():
        for a in u.get("accounts") or ():
            users_of.setdefault(a, set()).add(u["name"])
    for a, u in user_use:
        users_of.setdefault(a, set()).add(u)
    want_users = set(split_list(kv.get("users", "")))
    want_accts = set(split_list(kv.get("accounts", "")))
    rows: list[Row] = []
    for name, d in order:
        shown = (" " * d + name) if tree_view else name
        if not want_accts or name in want_accts:
            if not want_users:
                rows.append({"account_text": shown, "user": "", "proper": "",
                             "used": acct_use.get(name, 0.0)})
            for u in sorted(users_of.get(name, ())):
                if not want_users or u in want_users:
                    rows.append({"account_text": (" " * (d + 1) + name) if tree_view
                                 else name, "user": u, "proper": _gecos(u),
                                 "used": user_use.get((name, u), 0.0)})
    reported = sum(int(n.get("cpus") or 0) for n in client.nodes()) * (end - start)
    cols = _by_user_cols(cluster, units, reported, rows, account_first=True,
                         tree=tree_view)
    banner = [f"Cluster/Account/User Utilization {when(start)} - {when(end - 1)} "
              f"({int(end - start)} secs)"]
    return banner, cols, rows


def top_usage(ctx: Context, client: Any, cluster: str, units: Units, kv: dict[str, str],
               start: float, end: float, group: bool, *, by_account: bool = False
               ) -> tuple[list[str], list[Column], list[Row]]:
    """``user topusage``; with ``by_account`` ``cluster UserUtilizationByAccount`` (every
    user and account pair, no top limit, by user then account)."""
    count_text = kv.get("topcount", "10")
    if not count_text.isdigit() or int(count_text) < 1:
        raise ctx.fail(f"sreport: error: Invalid topcount value: {count_text}")
    count = int(count_text)
    want_users = set(split_list(kv.get("users", "")))
    want_accts = set(split_list(kv.get("accounts", "")))
    use: dict[tuple[str, str], float] = {}
    for user, account, secs in _charges(client, start, end, ctx.now):
        if (want_users and user not in want_users) or \
                (want_accts and account not in want_accts):
            continue
        key = (user, "" if group else account)
        use[key] = use.get(key, 0.0) + secs
    accounts: dict[str, list[str]] = {}
    if group:
        for user, account, _secs in _charges(client, start, end, ctx.now):
            if user in {k[0] for k in use} and account not in accounts.setdefault(user, []):
                accounts[user].append(account)
    ranked = sorted(use.items()) if by_account else \
        sorted(use.items(), key=lambda kv_: (-kv_[1], kv_[0]))[:count]
    rows = [{"user": u, "proper": _gecos(u),
             "account_text": ", ".join(accounts.get(u, [])) if group else a,  # as Slurm
             "used": secs} for (u, a), secs in ranked]
    reported = sum(int(n.get("cpus") or 0) for n in client.nodes()) * (end - start)
    cols = _by_user_cols(cluster, units, reported, rows, account_first=False)
    title = "Cluster/User/Account Utilization" if by_account else f"Top {count} Users"
    banner = [f"{title} {when(start)} - {when(end - 1)} ({int(end - start)} secs)"]
    return banner, cols, rows


def split_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]
