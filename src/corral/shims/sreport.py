"""``sreport``: accounting reports from the controller's job history, as Slurm 22.05.

Reports (names case-insensitive, abbreviated as Slurm allows):

- ``cluster utilization``: ``Cluster Allocated Down PLND Down Idle Reserved Reported``.
  Allocated is the CPU time jobs held inside the window (``corral.ops.accounting``'s
  rule: a job charges its CPUs for every second of its run inside the window); Reported
  is the CPUs configured now times the window (node history is not kept, so Down and
  PLND Down are 0, as is Reserved: Slurm's idle time held for waiting jobs); Idle is the
  rest.
- ``cluster AccountUtilizationByUser``: ``Cluster Account Login Proper Name Used
  Energy``: ``root`` (every job), then each account (its jobs and its sub-accounts') and
  its users, in the association tree's order (users before sub-accounts); accounts
  without usage are listed with 0, as Slurm lists every association. ``tree`` indents
  accounts by depth.
- ``cluster UserUtilizationByAccount``: the same columns for every user and account pair.
- ``user topusage``: ``Cluster Login Proper Name Account Used Energy``, the
  ``topcount=N`` (10) largest users; one row per user and account unless ``group`` (then
  the accounts joined with ``", "`` as Slurm's ``_set_user_acct`` does).

Window: ``start=``/``end=`` (Slurm's date forms; default yesterday 00:00 to today
00:00), both rounded down to the hour; the banner prints ``end - 1s``. One deliberate
difference: an end later than now is cut at now, not at now's hour as Slurm does (its
hourly rollup has not run yet; Corral reads the live history, so the current hour counts).
Time units: ``-t`` ``seconds|minutes|hours|percent`` and ``secper|minper|hourper``
(value and percentage), prefixes accepted; Slurm divides with integer arithmetic, so
does this. Energy is not measured (0). ``-n`` drops the banner and
the header, ``-p``/``-P`` as everywhere; ``format=``, ``users=``, ``accounts=`` filter and
choose columns; ``cluster(s)=`` and ``-M`` name this cluster only. Only CPU is reported
(``-T`` other than ``cpu`` is refused).
"""

from __future__ import annotations

from typing import Any

from corral.frontends.getopt import Arg, GetoptError, Opt, OptionTable, getopt_long
from corral.shims.context import Context, ShimExit
from corral.shims.printfields import FormatError, choose, render
from corral.shims.sreport_reports import (
    Units,
    account_by_user,
    cluster_util,
    period,
    split_list,
    top_usage,
)

R, N = Arg.REQUIRED, Arg.NONE
TABLE = OptionTable.of([
    Opt("all_clusters", ("all_clusters",), "a", N),
    Opt("cluster", ("cluster", "clusters"), "M", R),
    Opt("federation", ("federation",), None, N),
    Opt("help", ("help", "usage"), "h", N),
    Opt("local", ("local",), None, N),
    Opt("noheader", ("noheader",), "n", N),
    Opt("parsable", ("parsable",), "p", N),
    Opt("parsable2", ("parsable2",), "P", N),
    Opt("quiet", ("quiet",), "Q", N),
    Opt("sort", ("sort",), "s", R),
    Opt("time", ("time",), "t", R),
    Opt("tres", ("tres",), "T", R),
    Opt("verbose", ("verbose",), "v", N),
    Opt("version", ("version",), "V", N),
])
VERSION = "slurm 22.05.8"
USAGE = ("sreport [<OPTION>] [<COMMAND>]\n"
         "    Valid <OPTION> values are:\n"
         "     -a or --all_clusters: Use all clusters instead of current\n"
         "     -M or --cluster: Report on the named cluster\n"
         "     -n or --noheader: Don't print header when listing results\n"
         "     -p or --parsable: '|' delimited output with a trailing '|'\n"
         "     -P or --parsable2: '|' delimited output without a trailing '|'\n"
         "     -t <time_format>: Second, Minute, Hour, Percent, SecPer, MinPer, HourPer\n"
         "    Valid <COMMAND> values are: cluster utilization|AccountUtilizationByUser, "
         "user topusage")
BANNER = "-" * 80


def _matches(word: str, full: str, min_len: int) -> bool:
    low = word.lower()
    return len(low) >= min(min_len, len(full)) and full.lower().startswith(low)


def run(ctx: Context, client: Any) -> None:
    try:
        parsed, words = getopt_long(ctx.argv, TABLE, "sreport", stop_at_positional=False)
    except GetoptError as exc:
        raise ctx.fail(f"{exc.message}\nTry \"sreport --help\" for more information") \
            from None
    opts: dict[str, list[str]] = {}
    for p in parsed:
        opts.setdefault(p.opt.key, []).append(p.value or "")
    if "help" in opts:
        ctx.print(USAGE)
        return
    if "version" in opts:
        ctx.print(VERSION)
        return
    failed = False  # Slurm reports a bad condition or field, prints the rest, exits 1
    try:
        units = Units(opts["time"][-1] if "time" in opts else "minutes")
    except ValueError as exc:  # sreport.c: reported, and the report runs in minutes
        ctx.error(f"unknown time format {exc}")
        units = Units("minutes")
    for tres in split_list(",".join(opts.get("tres", []))):
        if tres.lower() != "cpu":
            raise ctx.fail(f"sreport: error: TRES {tres} is not reported by Corral's sreport"
                           " (cpu only)")
    if not words:
        raise ctx.fail("sreport: error: no command given (interactive mode is not "
                       "supported by Corral's sreport)\n" + USAGE.splitlines()[-1].strip())
    kind = words[0]
    if _matches(kind, "help", 2):
        ctx.print(USAGE)
        return
    kinds = (("association", 1), ("cluster", 2), ("job", 1), ("reservation", 2),
             ("resv", 2), ("user", 1))
    if not any(_matches(kind, k, m) for k, m in kinds):
        raise ctx.fail(f"invalid keyword: {kind}")
    if len(words) < 2:
        raise ctx.fail(f"too few arguments for keyword:{kind}")
    report, rest = words[1], words[2:]
    low_report = report.lower()
    if _matches(kind, "cluster", 2):
        if low_report[:1] == "a":
            which = "aubu"
        elif low_report[:2] == "ua" or _matches(report, "userutilizationbyaccount", 18):
            which = "uuba"
        elif low_report[:2] == "ut":
            which = "util"
        elif low_report[:2] == "uw" or low_report[:1] == "w":
            raise ctx.fail(f"sreport: error: {report}: WCKey reports are not available "
                           "(Corral keeps no WCKeys)")
        else:
            raise ctx.fail(f"Not valid report {report}\nValid cluster reports are, "
                           "\"AccountUtilizationByUser\", \"UserUtilizationByAccount\", "
                           "\"UserUtilizationByWckey\", \"Utilization\", and "
                           "\"WCKeyUtilizationByUser\"")
    elif _matches(kind, "user", 1):
        if low_report[:1] != "t":
            raise ctx.fail(f"Not valid report {report}\nValid user reports are, \"Top\"")
        which = "top"
    else:
        raise ctx.fail(f"sreport: error: {kind} reports are not available in Corral's "
                       "sreport (cluster and user reports are)")
    kv: dict[str, str] = {}
    flags: set[str] = set()
    for w in rest:
        key, eq, value = w.partition("=")
        low = key.lower()
        if not eq:
            flags.add(low)
            continue
        name = next((n for n, m in (("start", 1), ("end", 1), ("format", 1),
                                    ("clusters", 1), ("users", 1), ("accounts", 2),
                                    ("topcount", 1)) if _matches(low, n, m)), None)
        if name is None:
            ctx.error(f" Unknown condition: {w}\nUse keyword set to modify value")
            failed = True
            continue
        kv[name] = value
    cfg = client.cluster_config()
    cluster = str(cfg.get("cluster_name") or "corral")
    for want in split_list(kv.get("clusters", "")) + split_list(",".join(opts.get("cluster", []))):
        if want.lower() != cluster.lower():
            raise ctx.fail(f"sreport: error: cluster '{want}' is not known (Corral's sreport"
                           " reports this cluster only)")
    start, end = period(ctx, kv)
    if which == "util":
        banner, cols, rows = cluster_util(ctx, client, cluster, units, kv, start, end)
    elif which == "aubu":
        banner, cols, rows = account_by_user(ctx, client, cluster, units, kv, start, end,
                                              "tree" in flags)
    else:
        banner, cols, rows = top_usage(ctx, client, cluster, units, kv, start, end,
                                        "group" in flags, by_account=which == "uuba")
    if "format" in kv:
        chosen = []
        for item in split_list(kv["format"]):
            try:
                chosen.extend(choose(cols, item))
            except FormatError as exc:  # left out, as sreport does
                ctx.error(f" Unknown field '{exc.word}'")
                failed = True
        cols = chosen
    else:
        cols = [c for c in cols if c.name != "Over Comm"]  # not in Slurm's default
    header = "noheader" not in opts
    mode = "parsable2" if "parsable2" in opts else "parsable" if "parsable" in opts \
        else "fixed"
    if header:
        ctx.print(BANNER)
        for line in banner:
            ctx.print(line)
        ctx.print(f"Usage reported in {units.label}")
        ctx.print(BANNER)
    for line in render(cols, rows, header=header, mode=mode):
        ctx.print(line)
    if failed:
        raise ShimExit(1)
