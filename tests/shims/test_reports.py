"""sshare, sprio, sreport and sstat: Slurm 22.05's layouts (fake client), bad input, and
each shim against a real controller with accounts, usage and pending jobs."""

from __future__ import annotations

import getpass
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.shims.fakes import FakeClient, job
from tests.shims.harness import ShimCluster, start_cluster, stop_cluster
from tests.shims.scenario import run

ME = getpass.getuser()
EXTRA = f"""
[agent]
heartbeat_s = 0.5

[[accounts]]
name = "physics"
shares = 40

[[accounts]]
name = "chem"
shares = 10

[[accounts]]
name = "organic"
parent = "chem"
shares = 1

[[users]]
name = "{ME}"
accounts = ["physics", "organic"]

[[users]]
name = "alice"
accounts = ["chem"]
"""

SHARE_ROWS: list[dict[str, Any]] = [
    {"account": "chem", "user": "", "parent": "root", "depth": 0, "shares": 10,
     "norm_shares": 0.2, "raw_usage": 0.0, "eff_usage": 0.0, "level_fs": None,
     "fairshare": 1.0, "fair_tree": None},
    {"account": "chem", "user": "alice", "parent": "chem", "depth": 1, "shares": 1,
     "norm_shares": 0.1, "raw_usage": 0.0, "eff_usage": 0.0, "level_fs": None,
     "fairshare": 1.0, "fair_tree": 1.0},
    {"account": "organic", "user": "", "parent": "chem", "depth": 1, "shares": 1,
     "norm_shares": 0.1, "raw_usage": 0.0, "eff_usage": 0.0, "level_fs": None,
     "fairshare": 1.0, "fair_tree": None},
    {"account": "physics", "user": "", "parent": "root", "depth": 0, "shares": 40,
     "norm_shares": 0.8, "raw_usage": 3600.4, "eff_usage": 1.0, "level_fs": 0.8,
     "fairshare": 0.42, "fair_tree": None},
    {"account": "physics", "user": "bob", "parent": "physics", "depth": 1, "shares": 1,
     "norm_shares": 0.8, "raw_usage": 3600.4, "eff_usage": 1.0, "level_fs": 1.0,
     "fairshare": 0.42, "fair_tree": 0.5},
]


def _prio_job(jid: int, user: str, uid: int, age: float, fs: float, part: str = "debug"
              ) -> dict[str, Any]:
    w = {"age": 1000, "assoc": 0, "fairshare": 10000, "job_size": 1000, "partition": 1000,
         "qos": 0}
    v = {"age": age, "assoc": 0.0, "fairshare": fs, "job_size": 0.125, "partition": 1.0,
         "qos": 0.0}
    factors = {k: {"value": v[k], "weight": w[k], "contribution": v[k] * w[k]} for k in w}
    total = sum(f["contribution"] for f in factors.values())
    return {"id": jid, "user": user, "uid": uid, "account": "physics", "partition": part,
            "qos": "normal", "factors": factors, "site": 0, "nice": 0, "total": total,
            "admin_priority": None}


PRIO_JOBS = [_prio_job(12, "root", 0, 0.0105, 0.5), _prio_job(9, "bob", 1001, 1.0, 0.25),
             _prio_job(15, "root", 0, 0.0, 1.0, "debug,batch")]


class ReportClient(FakeClient):
    def job_usage(self, job_id: int | str) -> dict[str, Any]:
        return {"job_id": int(job_id), "running": True, "nodes": {
            "n1": {"node": "n1", "cpu_time_s": 90.5, "max_rss_mb": 100.0, "pids": [7],
                   "time": 0.0}}}

    def priorities(self) -> dict[str, Any]:
        return {"ordering": "multifactor", "jobs": [dict(j) for j in PRIO_JOBS],
                "weights": {"age": 1000, "assoc": 0, "fairshare": 10000, "job_size": 1000,
                            "partition": 1000, "qos": 0, "max_age_s": 604800}}

    def fairshare(self) -> dict[str, Any]:
        return {"algorithm": "fair_tree", "rows": [dict(r) for r in SHARE_ROWS]}

    def cluster_config(self) -> dict[str, Any]:
        return {"cluster_name": "shimtest", "accounts": [
            {"name": "physics", "shares": 40}, {"name": "chem", "shares": 10},
            {"name": "organic", "parent": "chem", "shares": 1}],
            "users": [{"name": "bob", "accounts": ["physics"]},
                      {"name": "alice", "accounts": ["chem"]}]}


def _at(day: int, hour: int) -> float:
    return time.mktime((2026, 11, day, hour, 0, 0, 0, 0, -1))


def history_client() -> ReportClient:
    """Yesterday (scenario NOW is 2026-11-29 22:11): root on physics 4 CPUs 10-12h, bob
    on organic 2 CPUs from 23h the day before to 01h (one hour inside), alice outside."""
    recs = [
        job(1, user="root", account="physics", num_cpus=4, state="COMPLETED",
            start_time=_at(28, 10), end_time=_at(28, 12)),
        job(2, user="bob", account="organic", num_cpus=2, state="COMPLETED",
            start_time=_at(27, 23), end_time=_at(28, 1)),
        job(3, user="alice", account="chem", num_cpus=8, state="COMPLETED",
            start_time=_at(29, 1), end_time=_at(29, 2)),
    ]
    return ReportClient(recs, nodes=[{"name": "n1", "cpus": 8}])


# ---- sshare: layout ----------------------------------------------------------------------

def test_sshare_default_layout_all_users() -> None:
    out, err, rc = run("sshare", ["-a"], ReportClient())
    assert (err, rc) == ("", 0)
    assert out.splitlines() == [
        "Account                    User  RawShares  NormShares    RawUsage  EffectvUsage"
        "  FairShare ",
        "-------------------- ---------- ---------- ----------- ----------- -------------"
        " ---------- ",
        "root                                          0.000000        3600      1.000000"
        "            ",
        " chem                                   10    0.200000           0      0.000000"
        "            ",
        "  chem                    alice          1    0.100000           0      0.000000"
        "   1.000000 ",
        "  organic                                1    0.100000           0      0.000000"
        "            ",
        " physics                                40    0.800000        3600      1.000000"
        "            ",
        "  physics                   bob          1    0.800000        3600      1.000000"
        "   0.500000 ",
    ]


def test_sshare_filters_and_parsable() -> None:
    c = ReportClient()
    out, _, _ = run("sshare", ["-P", "-n", "-u", "bob", "-U"], c)
    assert out == "physics|bob|1|0.800000|3600|1.000000|0.500000\n"  # -U: no indent
    out, _, _ = run("sshare", ["-ap", "-A", "physics", "--format=Account,User,LevelFS"], c)
    assert out.splitlines() == ["Account|User|LevelFS|", " physics||0.800000|",
                                "  physics|bob|1.000000|"]
    out, _, _ = run("sshare", ["-a", "-n", "-o", "acc%8,rawu"], c)  # %8: right-aligned
    assert out.splitlines()[0] == "    root        3600 "
    assert out.splitlines()[3] == "  organ+           0 "
    out, _, _ = run("sshare", ["-a", "-n", "-o", "acc%-8,rawu%2"], c)  # numbers: whole
    assert out.splitlines()[0] == "root     3600 "
    # no -a: every account row, the caller's own user rows only (uid 0: root has none)
    out, _, _ = run("sshare", ["-n", "-P", "-o", "account,user"], c)
    assert "bob" not in out and "alice" not in out and " physics|" in out


def test_account_probes_of_snakemake() -> None:
    """snakemake's Slurm plugin: ``sacctmgr -n -s list user U format=account%256``, then
    ``sshare -U --format Account%256 --noheader``; one account per line (stripped)."""
    c = ReportClient()
    out, err, rc = run("sacctmgr", ["-n", "-s", "list", "user", "bob", "format=account%256"],
                       c)
    assert (rc, err, [x.strip() for x in out.splitlines()]) == (0, "", ["physics"])
    assert len(out.splitlines()[0]) == 257  # right-aligned in 256 columns, then a space
    out, _, _ = run("sacctmgr", ["-nsP", "list", "user"], c)
    assert [x.split("|")[:5] for x in out.splitlines()] == [
        ["bob", "physics", "None", "shimtest", "physics"],
        ["alice", "chem", "None", "shimtest", "chem"]]
    out, err, rc = run("sshare", ["-U", "--format", "Account%256", "--noheader", "-u", "bob"],
                       c)
    assert (rc, err, out) == (0, "", "physics".rjust(256) + " \n")  # %256: right


def test_sshare_options_as_sshare_c() -> None:
    c = ReportClient()
    out, _, _ = run("sshare", ["-h", "-P", "-u", "-1", "-o", "user"], c)  # -h: no header
    assert [x for x in out.splitlines() if x] == ["alice", "bob"]  # -u -1: all users
    out, _, _ = run("sshare", ["-n", "-P", "-u", "0", "-o", "account,user"], c)  # a uid
    assert "bob" not in out and out.startswith("root|\n")
    out, err, rc = run("sshare", ["-u", "4000000000"], c)
    assert (out, err, rc) == ("", "Invalid user id: 4000000000\n", 1)
    out, _, _ = run("sshare", ["-e"], c)
    assert out.splitlines()[0] == "Account           Cluster           EffectvUsage      " \
        "FairShare        "


def test_sshare_classic_prints_every_factor() -> None:
    c = ReportClient()
    c.fairshare = lambda: {"algorithm": "classic",  # type: ignore[method-assign]
                           "rows": [dict(r) for r in SHARE_ROWS]}
    head = run("sshare", ["-l"], c)[0].splitlines()[0].split()
    assert "LevelFS" not in head and head[-1] == "TRESRunMins"  # classic -l: no LevelFS
    out, _, _ = run("sshare", ["-a", "-n", "-P", "-o", "account,user,fairshare"], c)
    assert out.splitlines()[1:] == [" chem||1.000000", "  chem|alice|1.000000",
                                    "  organic||1.000000", " physics||0.420000",
                                    "  physics|bob|0.420000"]


def test_sshare_long_has_slurm_columns() -> None:
    out, _, _ = run("sshare", ["-l", "-a"], ReportClient())
    head = out.splitlines()[0].split()
    assert head == ["Account", "User", "RawShares", "NormShares", "RawUsage", "NormUsage",
                    "EffectvUsage", "FairShare", "LevelFS", "GrpTRESMins", "TRESRunMins"]
    organic = next(x for x in out.splitlines() if "organic" in x)
    assert "inf" in organic and organic.endswith(" cpu=0,mem=0,energy=0,node=0,b+ ")


@pytest.mark.parametrize("argv,message", [
    (["--bogus"], "sshare: unrecognized option '--bogus'"),
    (["-o", "Account,Nope"], 'sshare: error: Invalid field requested: "Nope"'),
    (["extra"], "sshare: error: Unknown argument: extra"),
    (["-M", "other"], "cluster 'other' is not known"),
])
def test_sshare_bad_input(argv: list[str], message: str) -> None:
    out, err, rc = run("sshare", argv, ReportClient())
    assert rc == 1 and message in err and out == ""


# ---- sprio: layout ---------------------------------------------------------------------

def test_sprio_default_drops_zero_weight_columns() -> None:
    out, err, rc = run("sprio", [], ReportClient())
    assert (err, rc) == ("", 0)
    assert out.splitlines() == [
        "          JOBID PARTITION   PRIORITY       SITE        AGE  FAIRSHARE    JOBSIZE"
        "  PARTITION",
        "              9 debug           4625          0       1000       2500        125"
        "       1000",
        "             12 debug           6135          0         10       5000        125"
        "       1000",
        "             15 debug          11125          0          0      10000        125"
        "       1000",  # a job's partitions in its own order ("debug,batch")
        "             15 batch          11125          0          0      10000        125"
        "       1000",
    ]


def test_sprio_norm_long_weights_and_filters() -> None:
    c = ReportClient()
    out, _, _ = run("sprio", ["-n", "-h", "-j12"], c)
    # normalized: left-aligned %10 columns, the priority over 0xffffffff cut to 10
    assert out == ("             12 debug     0.00000142 0.0105000  0.5000000  0.1250000"
                   "  1.0000000 \n")
    out, _, _ = run("sprio", ["-u", "root", "-h", "-j12"], c)  # -u adds the user column
    assert out.split()[:3] == ["12", "debug", "root"]
    out, _, _ = run("sprio", ["-l", "-u", "root", "-p", "batch"], c)
    head, row = out.splitlines()
    assert head.split() == ["JOBID", "PARTITION", "USER", "PRIORITY", "SITE", "AGE", "ASSOC",
                            "FAIRSHARE", "JOBSIZE", "PARTITION", "QOS", "NICE", "TRES"]
    assert row.split() == ["15", "batch", "root", "11125", "0", "0", "0", "10000", "125",
                           "1000", "0", "0"]
    out, _, _ = run("sprio", ["-w"], c)
    assert out.splitlines()[1] == ("        Weights                               1       1000"
                                   "      10000       1000       1000")
    out, _, _ = run("sprio", ["-h", "-o", "%i|%u|%Y", "-S", "-Y"], c)
    assert out.splitlines() == ["15|root|11125", "15|root|11125", "12|root|6135",
                                "9|bob|4625"]
    out, _, rc = run("sprio", ["-j", "99"], c)  # optional argument: opts.c takes 99 anyway
    assert (out, rc) == ("Unable to find jobs matching user/id(s) specified\n", 0)
    out, _, rc = run("sprio", ["-j99"], c)
    assert (out, rc) == ("Unable to find jobs matching user/id(s) specified\n", 0)
    out, _, _ = run("sprio", ["-h"], c, env={"SPRIO_FORMAT": "%i:%u"})
    assert out.splitlines()[0] == "9:bob"
    out, err, rc = run("sprio", ["-h", "-o", "%i", "-u", "no-such-user-xyz,root"], c)
    assert rc == 0 and "sprio: error: Invalid user: no-such-user-xyz" in err  # reported
    assert out.split() == ["12", "15", "15"]  # and left out: root's jobs
    out, _, _ = run("sprio", ["--helpformat"], c)
    assert out.splitlines()[0] == "%a    %A    %b    %B    %c    %f    %F    %i    "


def test_sprio_admin_priority_and_floor() -> None:
    c = ReportClient()
    direct = dict(_prio_job(30, "root", 0, 0.5, 0.5), admin_priority=500)
    tiny = _prio_job(31, "root", 0, 0.0, 0.0)
    tiny["factors"] = {k: dict(v, contribution=0.0) for k, v in tiny["factors"].items()}
    c.priorities = lambda: {"jobs": [direct, tiny],  # type: ignore[method-assign]
                            "weights": {"age": 1000, "fairshare": 10000}}
    out, _, _ = run("sprio", ["-h", "-o", "%i %Y %A %F %S"], c)
    assert out.splitlines() == ["30 500 0 0 0", "31 1 0 0 0"]  # set by an admin; at least 1


@pytest.mark.parametrize("argv,message", [
    (["--bogus"], "sprio: unrecognized option '--bogus'"),
    (["-jx"], "sprio: error: Invalid job id: x"),
    (["-j", "12", "13"], "sprio: error: Unrecognized option: 13"),
    (["-l", "-o", "%i"], "Options -o(--format) and -l(--long) are mutually exclusive"),
    (["-M", "other"], "'other' can't be reached now"),
    (["-S", "-Z"], "sprio: error: Invalid sort specification: Z"),
])
def test_sprio_bad_input(argv: list[str], message: str) -> None:
    out, err, rc = run("sprio", argv, ReportClient())
    assert rc == 1 and message in err and out == ""


# ---- sreport: layout ---------------------------------------------------------------------

BANNER = "-" * 80


def test_sreport_cluster_utilization_layout() -> None:
    out, err, rc = run("sreport", ["cluster", "utilization"], history_client())
    assert (err, rc) == ("", 0)
    assert out.splitlines() == [
        BANNER, "Cluster Utilization 2026-11-28T00:00:00 - 2026-11-28T23:59:59",
        "Usage reported in CPU Minutes", BANNER,
        "  Cluster    Allocated       Down  PLND Down         Idle  Reserved     Reported ",
        "--------- ------------ ---------- ---------- ------------ --------- ------------ ",
        " shimtest          600          0          0        10920         0        11520 ",
    ]
    out, _, _ = run("sreport", ["-t", "percent", "-nP", "cluster", "util"], history_client())
    assert out == "shimtest|5.21%|0.00%|0.00%|94.79%|0.00%|100.00%\n"
    out, _, _ = run("sreport", ["-t", "hourper", "-p", "cluster", "utilization",
                                "start=2026-11-28T10:00", "end=2026-11-28T11:30",
                                "format=cluster,alloc,reported"], history_client())
    assert out.splitlines()[1:] == [  # the end is rounded down to the hour: 10-11h
        "Cluster Utilization 2026-11-28T10:00:00 - 2026-11-28T10:59:59",
        "Usage reported in CPU Hours/Percentage of Total", BANNER,
        "Cluster|Allocated|Reported|", "shimtest|4(50.00%)|8(100.00%)|"]


class NodeHistoryClient(ReportClient):
    """The day before: n1 DOWN 02-03h, a MAINT reservation 04-05h, reservation r on n1
    10-13h (job 1 used 4 of its 8 CPUs 10-12h)."""

    def node_history(self, since: float, until: float) -> dict[str, Any]:
        self.calls.append(("node_history", (since, until)))
        return {"nodes": [{"name": "n1", "state": "DOWN", "start": _at(28, 2),
                           "end": _at(28, 3), "cpus": 8}],
                "reservations": [
                    {"name": "maint", "start": _at(28, 4), "end": _at(28, 5), "cpus": 8,
                     "maint": True, "nodes": ["n1"]},
                    {"name": "r", "start": _at(28, 10), "end": _at(28, 13), "cpus": 8,
                     "maint": False, "nodes": ["n1"]}]}


def test_sreport_cluster_utilization_down_and_reserved() -> None:
    c = NodeHistoryClient(history_client().records, nodes=[{"name": "n1", "cpus": 8}])
    c.records[0].update(nodes=["n1"], nodelist="n1")
    out, err, rc = run("sreport", ["-nP", "cluster", "utilization"], c)
    assert (err, rc) == ("", 0)
    # minutes: 600 allocated, 480 down, 480 planned down (MAINT), 1440-480 reserved
    assert out == "shimtest|600|480|480|9000|960|11520\n"
    assert ("node_history", (_at(28, 0), _at(29, 0))) in c.calls


def test_sreport_account_utilization_by_user() -> None:
    out, _, rc = run("sreport", ["cluster", "AccountUtilizationByUser"], history_client())
    lines = out.splitlines()
    assert rc == 0 and lines[1] == ("Cluster/Account/User Utilization 2026-11-28T00:00:00 - "
                                    "2026-11-28T23:59:59 (86400 secs)")
    assert lines[4:6] == [
        "  Cluster         Account     Login     Proper Name     Used   Energy ",
        "--------- --------------- --------- --------------- -------- -------- "]
    rows = [x.split() for x in lines[6:]]
    assert [r[1:] for r in rows if len(r) == 4] == [  # account rows (no login)
        ["root", "600", "0"], ["chem", "120", "0"], ["organic", "120", "0"],
        ["physics", "480", "0"]]
    assert ["shimtest", "organic", "bob"] == [r for r in rows if "bob" in r][0][:3]
    assert ["shimtest", "physics", "root", "root", "480", "0"] in rows  # gecos: root
    out, _, _ = run("sreport", ["-nP", "cluster", "acc", "tree", "accounts=organic"],
                    history_client())
    assert out.splitlines() == ["shimtest|  organic|||120|0",  # tree: users one deeper
                                "shimtest|   organic|bob||120|0"]


def test_sreport_usage_column_grows_and_per_forms() -> None:
    c = history_client()
    c.records.append(job(4, user="root", account="physics", num_cpus=4096,
                         state="COMPLETED", start_time=_at(28, 0), end_time=_at(29, 0)))
    c.node_records = [{"name": "n1", "cpus": 8192}]
    out, _, _ = run("sreport", ["-t", "seconds", "cluster", "AccountUtilizationByUser",
                                "format=account,used"], c)
    head = out.splitlines()[4]  # 4096 CPUs x 86400 s = 353894400 s: 9 digits, width 9
    assert head == "        Account      Used "
    out, _, _ = run("sreport", ["-t", "minper", "cluster", "utilization",
                                "format=cluster,allocated,down"], c)
    assert out.splitlines()[4:] == [
        "  Cluster            Allocated               Down ",
        "--------- -------------------- ------------------ ",
        " shimtest      5898840(50.01%)           0(0.00%) "]


def test_sreport_user_topusage() -> None:
    out, _, rc = run("sreport", ["user", "topusage", "-t", "hours"], history_client())
    lines = out.splitlines()
    assert rc == 0 and lines[1].startswith("Top 10 Users 2026-11-28T00:00:00 - ")
    assert lines[2] == "Usage reported in CPU Hours"
    assert lines[4].split() == ["Cluster", "Login", "Proper", "Name", "Account", "Used",
                                "Energy"]
    rows = [x.split() for x in lines[6:]]
    assert [(r[1], r[-3], r[-2]) for r in rows] == [("root", "physics", "8"),
                                                   ("bob", "organic", "2")]
    out, _, _ = run("sreport", ["-nP", "user", "top", "topcount=1", "group"],
                    history_client())
    assert out.count("\n") == 1 and out.startswith("shimtest|root|")
    c = history_client()
    c.records.append(job(5, user="root", account="chem", num_cpus=1, state="COMPLETED",
                         start_time=_at(28, 3), end_time=_at(28, 4)))
    out, _, _ = run("sreport", ["-nP", "user", "top", "group"], c)
    assert out.splitlines()[0] == "shimtest|root|root|physics, chem|540|0"  # grouped
    out, _, _ = run("sreport", ["-nP", "user", "top"], c)
    assert [x.split("|")[3:5] for x in out.splitlines()] == [
        ["physics", "480"], ["organic", "120"], ["chem", "60"]]


@pytest.mark.parametrize("argv,message", [
    (["--bogus", "cluster", "utilization"], "sreport: unrecognized option '--bogus'"),
    (["cluster"], "too few arguments for keyword:cluster"),
    (["clu", "nothing"], "Not valid report nothing\nValid cluster reports are, "),
    (["user", "bottom"], "Not valid report bottom\nValid user reports are, \"Top\""),
    (["nonsense", "x"], "invalid keyword: nonsense"),
    (["job", "sizes"], "job reports are not available"),
    (["cluster", "utilization", "start=garbage"], "sreport: error:"),
    (["-T", "gres/gpu", "cluster", "utilization"], "cpu only"),
    (["user", "topusage", "topcount=0"], "Invalid topcount value: 0"),
    (["cluster", "utilization", "clusters=other"], "cluster 'other' is not known"),
])
def test_sreport_bad_input(argv: list[str], message: str) -> None:
    out, err, rc = run("sreport", argv, history_client())
    assert rc == 1 and message in err and out == ""


def test_sreport_reports_bad_parts_and_goes_on() -> None:
    """sreport.c prints the report without a bad condition or field and exits 1; an
    unknown -t is reported and the report is in minutes (exit 0)."""
    c = history_client()
    out, err, rc = run("sreport", ["-nP", "cluster", "util", "bogus=1"], c)
    assert (rc, err) == (1, " Unknown condition: bogus=1\nUse keyword set to modify value\n")
    assert out == "shimtest|600|0|0|10920|0|11520\n"
    out, err, rc = run("sreport", ["-nP", "cluster", "util", "format=cluster,nope,alloc"], c)
    assert (rc, err, out) == (1, " Unknown field 'nope'\n", "shimtest|600\n")
    out, err, rc = run("sreport", ["-t", "fortnights", "cluster", "utilization"], c)
    assert (rc, err) == (0, "unknown time format fortnights\n")
    assert "Usage reported in CPU Minutes" in out


def test_sreport_user_utilization_by_account() -> None:
    out, _, rc = run("sreport", ["cluster", "UserUtilizationByAccount"], history_client())
    lines = out.splitlines()
    assert rc == 0 and lines[1].startswith("Cluster/User/Account Utilization 2026-11-28T")
    assert [x.split()[1:] for x in lines[6:]] == [["bob", "organic", "120", "0"],
                                                  ["root", "root", "physics", "480", "0"]]



# ---- sstat: layout ----------------------------------------------------------------------

def sstat_client() -> ReportClient:
    step = {"step_id": 0, "name": "python", "state": "RUNNING", "nodes": ["n1"],
            "ntasks": 2, "start_time": 1000.0, "end_time": None, "usage": None}
    done = dict(step, step_id=1, state="COMPLETED", end_time=1500.0)
    return ReportClient([
        job(20, state="RUNNING", start_time=1000.0, nodes=["n1"], num_cpus=2,
            steps=[step, done]),
        job(21, state="COMPLETED", start_time=1000.0, end_time=1100.0, nodes=["n1"]),
    ])


def test_sstat_steps_and_live_usage() -> None:
    c = sstat_client()
    out, err, rc = run("sstat", ["-a", "-P", "-j", "20", "-o",
                                 "JobID,MaxRSS,MaxRSSNode,AveCPU,NTasks"], c)
    assert (err, rc) == ("", 0)
    assert out.splitlines() == ["JobID|MaxRSS|MaxRSSNode|AveCPU|NTasks",
                                "20.batch|100M|n1|00:01:30|1", "20.0||||2"]
    out, _, _ = run("sstat", ["-n", "-p", "-j20", "-o", "jobid,ntasks"], c)
    assert out == "20.0|2|\n"  # no step given: the lowest running srun step
    out, _, _ = run("sstat", ["-j", "20.batch", "-o", "JobID,MaxRSS%12"], c)
    assert out.splitlines() == ["JobID              MaxRSS ",
                                "------------ ------------ ",
                                "20.batch             100M "]
    head = run("sstat", ["-j", "20"], c)[0].splitlines()[0].split()
    assert head[:6] == ["JobID", "MaxVMSize", "MaxVMSizeNode", "MaxVMSizeTask", "AveVMSize",
                        "MaxRSS"] and head[-1] == "TRESUsageOutTot"


@pytest.mark.parametrize("argv,message,rc", [
    ([], "sstat: error: You didn't give me any jobs to stat.", 1),
    (["--bogus", "-j", "20"], "sstat: unrecognized option '--bogus'", 1),
    (["-j", "abc"], "sstat: error: Invalid job id specified: abc", 1),
    (["-j", "20", "-o", "JobID,Bogus"], 'sstat: error: Invalid field requested: "Bogus"', 1),
    # Slurm reports these, goes on to the next job and still exits 0
    (["-j", "21"], "sstat: error: couldn't get steps for job 21", 0),
    (["-j", "999"], "sstat: error: couldn't get steps for job 999", 0),
    (["-j", "20.1"], "problem getting step_layout for 20.1", 0),  # that step has ended
])
def test_sstat_bad_input(argv: list[str], message: str, rc: int) -> None:
    out, err, got = run("sstat", argv, sstat_client())
    # Slurm prints the header before it looks at the jobs: no rows under it
    assert got == rc and message in err and len(out.splitlines()) in (0, 2)


def test_sstat_pid_format_and_no_running_step() -> None:
    c = sstat_client()
    out, _, _ = run("sstat", ["-i", "-a", "-P", "-j", "20"], c)
    assert out.splitlines() == ["JobID|Nodelist|Pids", "20.batch|n1|7", "20.0|n1|"]
    head = run("sstat", ["-i", "-j", "20"], c)[0].splitlines()[0]
    assert head == "JobID                    Nodelist                 Pids "
    c.records[0]["steps"] = []  # only the batch script runs: no srun step to pick
    out, err, rc = run("sstat", ["-n", "-j", "20", "-j", "20.batch", "-o", "jobid"], c)
    assert (out, rc) == ("20.batch     \n", 0)
    assert err == "sstat: error: no steps running for job 20\n"


class LiveStepClient(ReportClient):
    """Job 30: step 0 on n1,n2 (one task each), both nodes' heartbeats sampled it."""

    def job_usage(self, job_id: int | str) -> dict[str, Any]:
        def node(name: str, cpu: float, rss: float, pid: int) -> dict[str, Any]:
            return {"node": name, "cpu_time_s": cpu + 1, "max_rss_mb": rss + 1,
                    "pids": [pid], "time": 0.0, "steps": {"0": {
                        "cpu_time_s": cpu, "max_rss_mb": rss, "ntasks": 1, "pids": [pid]}}}
        return {"job_id": int(job_id), "running": True,
                "nodes": {"n1": node("n1", 40.0, 10.0, 11), "n2": node("n2", 20.0, 30.0, 22)}}


def test_sstat_running_srun_step_live_usage_over_its_nodes() -> None:
    step = {"step_id": 0, "name": "burn", "state": "RUNNING", "nodes": ["n1", "n2"],
            "node_tasks": [[0], [1]], "ntasks": 2, "start_time": 1000.0, "end_time": None,
            "usage": None}
    c = LiveStepClient([job(30, state="RUNNING", start_time=1000.0, nodes=["n1", "n2"],
                            num_nodes=2, num_cpus=2, steps=[step])])
    cols = "JobID,MaxRSS,MaxRSSNode,MaxRSSTask,AveCPU,MinCPU,MinCPUNode,MinCPUTask,NTasks"
    for word in ("30", "30.0"):
        out, err, rc = run("sstat", ["-n", "-P", "-j", word, "-o", cols], c)
        assert (err, rc) == ("", 0)
        assert out.splitlines() == ["30.0|30M|n2|1|00:00:30|00:00:20|n2|1|2"]
    out, _, _ = run("sstat", ["-i", "-n", "-P", "-j", "30.0"], c)
    assert out.splitlines() == ["30.0|n[1-2]|11,22"]


# ---- against a real controller -----------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ShimCluster]:
    c = start_cluster(tmp_path_factory.mktemp("reports"), EXTRA)
    try:
        yield c
    finally:
        stop_cluster(c)


def _sbatch(c: ShimCluster, *args: str) -> int:
    r = c.run("sbatch", "--parsable", *args)
    assert r.returncode == 0, r.stderr
    return int(r.stdout.strip().split(";")[0])


@pytest.fixture(scope="module")
def used(cluster: ShimCluster) -> int:
    """A finished 2-CPU job charged to physics (usage for sshare/sreport)."""
    jid = _sbatch(cluster, "-A", "physics", "-c", "2", "--wrap", "sleep 1.2")
    cluster.wait_job(jid, lambda j: j.get("state") == "COMPLETED")
    return jid


def test_sshare_real_controller(cluster: ShimCluster, used: int, tmp_path: Path) -> None:
    r = cluster.run("sshare", "-P")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "Account|User|RawShares|NormShares|RawUsage|EffectvUsage|FairShare"
    assert lines[1].startswith("root||")
    mine = [x.split("|") for x in lines if f"|{ME}|" in x]
    assert [m[0] for m in mine] == ["   organic", "  physics"]  # chem > organic > me
    physics = next(m for m in mine if m[0] == "  physics")
    assert int(physics[4]) >= 2 and 0 < float(physics[6]) < 1  # usage charged; factor
    assert not any("|alice|" in x for x in lines)
    r = cluster.run("sshare", "-a", "-n", "-P", "-o", "account,user,rawshares")
    assert "  chem|alice|1" in r.stdout.splitlines()
    assert re.search(r"^ chem\|\|10$", r.stdout, re.M)
    bad = cluster.run("sshare", "--nope")
    assert bad.returncode == 1 and "unrecognized option '--nope'" in bad.stderr


def test_sprio_real_controller(cluster: ShimCluster) -> None:
    held = _sbatch(cluster, "-A", "physics", "--hold", "--wrap", "true")
    other = _sbatch(cluster, "-A", "organic", "-c", "4", "--hold", "--wrap", "true")
    try:
        r = cluster.run("sprio", "-l")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0].split()[:5] == ["JOBID", "PARTITION", "USER", "PRIORITY", "SITE"]
        rows = {int(x.split()[0]): x.split() for x in lines[1:]}
        assert {held, other} <= set(rows)
        assert rows[held][1:3] == ["debug", ME]
        # fair share: physics has used CPU time, organic none -> organic's factor is higher
        n = cluster.run("sprio", "-n", "-h", "-o", "%i %f", f"-j{held},{other}").stdout
        fs = {int(a): float(b) for a, b in (x.split() for x in n.splitlines())}
        assert fs[other] >= fs[held]
        w = cluster.run("sprio", "-w", "-h").stdout.split()
        assert w[0] == "Weights" and "10000" in w  # PriorityWeightFairshare default
        assert cluster.run("sprio", "--nope").returncode == 1
    finally:
        cluster.run("scancel", str(held), str(other))


def test_sreport_real_controller(cluster: ShimCluster, used: int) -> None:
    r = cluster.run("sreport", "-t", "seconds", "-nP", "cluster", "utilization",
                    "start=now-1hour", "end=now+1hour")
    assert r.returncode == 0, r.stderr
    fields = r.stdout.strip().split("|")
    assert fields[0] == "shimtest" and int(fields[1]) >= 2  # the 2-CPU job's seconds
    alloc, idle, reported = int(fields[1]), int(fields[4]), int(fields[-1])
    assert reported >= alloc + idle - 1 and reported > 0  # 8 CPUs since the hour began
    r = cluster.run("sreport", "-nP", "-t", "seconds", "user", "topusage",
                    "start=now-1hour", "end=now+1hour")
    assert r.returncode == 0 and r.stdout.startswith(f"shimtest|{ME}|"), r.stdout
    r = cluster.run("sreport", "-nP", "-t", "sec", "cluster", "AccountUtilizationByUser",
                    "start=now-1hour", "end=now+1hour", "format=account,login,used")
    assert f"physics|{ME}|" in r.stdout and "root||" in r.stdout
    assert cluster.run("sreport", "cluster", "bogus").returncode == 1


def test_sstat_real_controller(cluster: ShimCluster, used: int, tmp_path: Path) -> None:
    script = tmp_path / "burn.sh"
    script.write_text("#!/bin/bash\npython3 -c 'import time\nx=bytearray(64<<20)\n"
                      "t=time.time()\nwhile time.time()-t<30: pass'\n")
    jid = _sbatch(cluster, "-A", "physics", str(script))
    try:
        cluster.wait_job(jid, lambda j: j.get("state") == "RUNNING")
        deadline = time.monotonic() + 20
        fields: list[str] = []
        while time.monotonic() < deadline:  # until a heartbeat carried a sample
            r = cluster.run("sstat", "-a", "-n", "-P", "-j", str(jid), "-o",
                            "JobID,MaxRSS,MaxRSSNode,AveCPU")
            assert r.returncode == 0, r.stderr
            fields = r.stdout.strip().split("|")
            if fields[1] and fields[3] != "00:00:00":
                break
            time.sleep(0.2)
        assert fields[0] == f"{jid}.batch" and fields[2] == cluster.node, fields
        kib = float(fields[1][:-1]) * {"K": 1, "M": 1024, "G": 1 << 20}[fields[1][-1]]
        assert kib >= 64 * 1024 and fields[3] != "00:00:00", fields  # its 64 MiB, CPU
        # the same through the REST client (the shim in the caller's process)
        local = dict(cluster.env, CORRAL_SHIM_LOCAL="1")
        r = cluster.run("sstat", "-a", "-n", "-P", "-j", str(jid), "-o", "JobID,MaxRSSNode",
                        env=local)
        assert r.stdout.splitlines()[0] == f"{jid}.batch|{cluster.node}", r.stderr
        r = cluster.run("sshare", "-n", "-P", "-o", "account", "-A", "physics", env=local)
        assert r.stdout.splitlines()[0] == " physics", r.stderr
        r = cluster.run("sprio", "-w", "-h", env=local)
        assert r.stdout.split()[0] == "Weights", r.stderr
    finally:
        cluster.run("scancel", str(jid))
    done = cluster.run("sstat", "-j", str(used))  # finished
    assert done.returncode == 0 and "couldn't get steps for job" in done.stderr


def test_sstat_running_srun_step_real_controller(cluster: ShimCluster, tmp_path: Path) -> None:
    script = tmp_path / "step.sh"
    script.write_text("#!/bin/bash\nsrun -n1 python3 -c 'import time\nx=bytearray(48<<20)\n"
                      "t=time.time()\nwhile time.time()-t<30: pass'\n")
    jid = _sbatch(cluster, "-A", "physics", str(script))
    try:
        deadline = time.monotonic() + 30
        fields: list[str] = []
        while time.monotonic() < deadline:  # until a heartbeat sampled the running step
            r = cluster.run("sstat", "-n", "-P", "-j", str(jid), "-o",
                            "JobID,MaxRSS,MaxRSSNode,AveCPU,NTasks")
            assert r.returncode == 0, r.stderr
            fields = r.stdout.strip().split("|")
            if len(fields) == 5 and fields[1] and fields[3] not in ("", "00:00:00"):
                break
            time.sleep(0.2)
        assert fields[0] == f"{jid}.0" and fields[2] == cluster.node, fields
        kib = float(fields[1][:-1]) * {"K": 1, "M": 1024, "G": 1 << 20}[fields[1][-1]]
        assert kib >= 48 * 1024 and fields[3] != "00:00:00" and fields[4] == "1", fields
        r = cluster.run("sstat", "-i", "-n", "-P", "-j", f"{jid}.0")
        pids = r.stdout.strip().split("|")[2]
        assert pids and all(p.isdigit() for p in pids.split(",")), r.stdout
    finally:
        cluster.run("scancel", str(jid))



def _cpu_s(text: str) -> float:
    """sstat's AveCPU ([DD-[HH:]]MM:SS[.mmm]) in seconds."""
    days, _, rest = text.rpartition("-")
    parts = [float(p) for p in rest.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    return (float(days or 0) * 24 + parts[0]) * 3600 + parts[1] * 60 + parts[2]


def test_sstat_batch_counts_only_the_batch_script(cluster: ShimCluster,
                                                  tmp_path: Path) -> None:
    """``.batch`` is the batch script's own share, as Slurm's batch step: not the
    processes of a running srun step (launched through the agent), nor the CPU of an
    ended step that srun ran as its own children (reaped into the script's time)."""
    burn = ("import sys,time\nx=bytearray(int(sys.argv[2])<<20)\n"  # CPU seconds, not wall
            "while time.process_time()<float(sys.argv[1]): pass")
    (tmp_path / "burn.py").write_text(burn)
    script = tmp_path / "mixed.sh"
    script.write_text(
        "#!/bin/bash\n"
        f"CORRAL_SRUN_LAUNCH=local srun -n1 python3 {tmp_path}/burn.py 3 1\n"
        f"CORRAL_SRUN_LAUNCH=agents srun -n1 python3 {tmp_path}/burn.py 40 200 &\n"
        "sleep 60\n")
    jid = _sbatch(cluster, "-A", "physics", "-c", "2", str(script))
    try:
        deadline = time.monotonic() + 40
        rows: dict[str, list[str]] = {}
        while time.monotonic() < deadline:  # until step 1 has burnt 3 s on a heartbeat
            r = cluster.run("sstat", "-a", "-n", "-P", "-j", str(jid), "-o",
                            "JobID,MaxRSS,AveCPU")
            assert r.returncode == 0, r.stderr
            rows = {f[0]: f for f in (line.split("|") for line in r.stdout.splitlines())}
            step = rows.get(f"{jid}.1")
            if step and step[2] and _cpu_s(step[2]) >= 3.0 and rows.get(f"{jid}.batch", [
                    "", ""])[1]:
                break
            time.sleep(0.2)
        step, batch = rows[f"{jid}.1"], rows[f"{jid}.batch"]
        assert _cpu_s(step[2]) >= 3.0, rows
        mib = {"K": 1 / 1024, "M": 1, "G": 1024}
        assert float(step[1][:-1]) * mib[step[1][-1]] >= 200, rows  # its bytearray
        # the batch script: bash, two sruns and sleep; not step 1's 200 MiB and CPU,
        # nor step 0's 3 s (ended, reaped by srun, then by bash)
        assert float(batch[1][:-1]) * mib[batch[1][-1]] < 150, rows
        assert _cpu_s(batch[2]) < 2.0, rows
        with cluster.client() as c:
            job = c.job(jid)
        ended = [s for s in job["steps"] if s["step_id"] == 0]
        assert ended and ended[0]["end_time"] and ended[0]["cpu_time_s"] >= 2.5, ended
        r = cluster.run("sstat", "-i", "-n", "-P", "-j", f"{jid}.batch")
        batch_pids = set(r.stdout.strip().split("|")[2].split(","))
        r = cluster.run("sstat", "-i", "-n", "-P", "-j", f"{jid}.1")
        step_pids = set(r.stdout.strip().split("|")[2].split(","))
        assert batch_pids and step_pids and not batch_pids & step_pids, (batch_pids,
                                                                         step_pids)
    finally:
        cluster.run("scancel", str(jid))
