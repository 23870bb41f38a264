"""Advance reservations on a real cluster through the installed shims: scontrol create /
show / update / delete, sinfo -T, a maintenance window that long jobs wait for and short
ones fit before, a job inside an active reservation while others wait, refusals, and the
reservations surviving a controller restart."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import TEST_CONFIG, Cluster, corral, wait_for


class Shims:
    def __init__(self, c: Cluster) -> None:
        self.c = c
        self.bin = c.root / "bin"
        r = corral("shims", "install", "--force", str(self.bin))
        assert r.returncode == 0, r.stderr
        self.env = dict(os.environ, PATH=f"{self.bin}:{os.environ['PATH']}",
                        CORRAL_SOCKET=str(c.sock))

    def run(self, cmd: str, user: int | None = None) -> subprocess.CompletedProcess[str]:
        def drop() -> None:
            if user is not None:
                os.setgid(user)
                os.setuid(user)

        return subprocess.run(cmd, shell=True, env=self.env, cwd=self.c.work, text=True,
                              capture_output=True, timeout=60,
                              preexec_fn=drop if user is not None else None)

    def ok(self, cmd: str) -> str:
        p = self.run(cmd)
        assert p.returncode == 0, (cmd, p.stdout, p.stderr)
        return p.stdout


@pytest.fixture(scope="module")
def sh() -> Iterator[Shims]:
    root = Path(tempfile.mkdtemp(prefix="corral-resv-"))
    c = Cluster(root, config=TEST_CONFIG)
    c.up()
    try:
        yield Shims(c)
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


def _jid(out: str) -> int:
    m = re.match(r"^Submitted batch job (\d+)$", out.strip())
    assert m, out
    return int(m.group(1))


def test_no_reservations(sh: Shims) -> None:
    assert sh.ok("scontrol show reservation") == "No reservations in the system\n"
    assert sh.ok("sinfo -T") == "No reservations in the system\n"
    p = sh.run("scontrol show reservation nope")
    assert (p.returncode, p.stderr) == (1, "Reservation nope not found\n")


def test_maintenance_window(sh: Shims) -> None:
    out = sh.ok("scontrol create reservation ReservationName=maint StartTime=now+1hour "
                "Duration=60 Nodes=testnode Users=root Flags=MAINT")
    assert out == "Reservation created: maint\n"
    lines = sh.ok("scontrol show reservation maint").splitlines()
    assert re.match(r"^ReservationName=maint StartTime=\S+ EndTime=\S+ Duration=01:00:00$",
                    lines[0]), lines
    assert lines[1] == ("   Nodes=testnode NodeCnt=1 CoreCnt=16 Features=(null) "
                        "PartitionName=(null) Flags=MAINT,SPEC_NODES"), lines
    assert lines[2] == "   TRES=cpu=16"
    assert lines[3] == ("   Users=root Groups=(null) Accounts=(null) Licenses=(null) "
                        "State=INACTIVE BurstBuffer=(null) Watts=n/a")
    assert lines[4] == "   MaxStartDelay=(null)"
    table = sh.ok("sinfo -T").splitlines()
    assert table[0] == ("RESV_NAME     STATE           START_TIME             END_TIME     "
                        "DURATION  NODELIST")
    assert re.match(r"^maint      INACTIVE  \S{19}  \S{19}     01:00:00  testnode$",
                    table[1]), table
    # a job whose time limit crosses the window waits, one that ends before it runs
    long_ = _jid(sh.ok("sbatch -t 2:00:00 --wrap 'true'"))
    short = _jid(sh.ok("sbatch -t 10 --wrap 'true'"))
    assert sh.c.wait_done(short)["state"] == "COMPLETED"
    reason = wait_for(lambda: sh.ok(f"squeue -h -j {long_} -o %r").strip() or None, 10)
    assert reason == "ReqNodeNotAvail, Reserved for maintenance"
    assert sh.c.job(long_)["state"] == "PENDING"
    # moved past the job's end: it runs
    assert sh.ok("scontrol update ReservationName=maint StartTime=now+3hours") == \
        "Reservation updated.\n"
    assert sh.c.wait_done(long_)["state"] == "COMPLETED"
    sh.ok("scontrol delete ReservationName=maint")
    assert sh.ok("scontrol show res") == "No reservations in the system\n"


def test_jobs_inside_an_active_reservation(sh: Shims) -> None:
    p = sh.run("sbatch --reservation=nope --wrap true")
    assert p.returncode == 1
    assert p.stderr.strip().endswith("Requested reservation is invalid"), p.stderr
    assert sh.ok("scontrol create res ReservationName=now StartTime=now Duration=30 "
                 "Nodes=ALL Users=root") == "Reservation created: now\n"
    assert "State=ACTIVE" in sh.ok("scontrol show res now")
    assert "Flags=SPEC_NODES,ALL_NODES" in sh.ok("scontrol show res now")
    outside = _jid(sh.ok("sbatch -t 5 --wrap true"))
    inside = _jid(sh.ok("sbatch -t 5 --reservation=now --wrap true"))
    assert sh.c.wait_done(inside)["state"] == "COMPLETED"
    assert sh.c.job(outside)["state"] == "PENDING"  # the only node is reserved
    # a second reservation over the same nodes and time is refused (no OVERLAP)
    p = sh.run("scontrol create res ReservationName=two StartTime=now Duration=10 "
               "Nodes=testnode Users=root")
    assert (p.returncode, p.stderr) == (
        1, "Error creating the reservation: Requested nodes are busy\n")
    # they survive a controller restart
    pid = sh.c.controller_pid()
    assert pid is not None
    sh.c.kill9(pid)
    sh.c.start_controller()
    assert "ReservationName=now " in sh.ok("scontrol show reservation")
    inside2 = _jid(sh.ok("sbatch -t 5 --reservation=now --wrap true"))
    assert sh.c.wait_done(inside2)["state"] == "COMPLETED"
    sh.ok("scontrol delete reservation ReservationName=now")
    assert sh.c.wait_done(outside)["state"] == "COMPLETED"


def test_only_operators_change_reservations(sh: Shims, test_user: object) -> None:
    import pwd

    uid = pwd.getpwnam("corraltest").pw_uid
    p = sh.run("scontrol create res ReservationName=mine StartTime=now Duration=5 "
               "Nodes=ALL Users=corraltest", user=uid)
    assert p.returncode == 1
    assert p.stderr == "Error creating the reservation: Access/permission denied\n", p.stderr
    assert sh.ok("scontrol create res ReservationName=theirs StartTime=now+1day Duration=5 "
                 "Nodes=ALL Users=root")
    p = sh.run("sbatch --reservation=theirs --wrap true", user=uid)
    assert p.returncode == 1 and "Access denied to requested reservation" in p.stderr
    p = sh.run("scontrol create res StartTime=now Duration=5 Nodes=ALL")
    assert p.stderr == "Error creating the reservation: Users or Accounts must be " \
        "specified\n", p.stderr
    p = sh.run("scontrol create res ReservationName=x StartTime=now Duration=5 Nodes=ALL "
               "Users=root Flags=FANCY")
    assert p.returncode == 1 and "Invalid reservation flags" in p.stderr, p.stderr
    sh.ok("scontrol delete ReservationName=theirs")


def test_corral_reservation_cli(sh: Shims) -> None:
    import json

    from tests.e2e.cluster import corral

    r = corral("reservation", "create", "cli1", "--start", "now+1day", "--duration", "30",
               "--nodes", "testnode", "--users", "root", "--flags", "MAINT", env=sh.env)
    assert (r.returncode, r.stdout) == (0, "Reservation created: cli1\n"), r.stderr
    r = corral("reservation", "list", "--json", env=sh.env)
    got = json.loads(r.stdout)["reservations"]
    assert [(x["name"], x["state"], x["duration_s"], x["flags"]) for x in got] == [
        ("cli1", "INACTIVE", 1800.0, ["MAINT", "SPEC_NODES"])]
    r = corral("reservation", "update", "cli1", "--users", "+daemon", env=sh.env)
    assert r.returncode == 0, r.stderr
    assert "Users=root,daemon " in sh.ok("scontrol show res cli1")
    r = corral("reservation", "list", env=sh.env)
    assert "cli1" in r.stdout and "INACTIVE" in r.stdout
    r = corral("reservation", "create", "cli2", "--duration", "5", "--nodes", "nosuch",
               "--users", "root", env=sh.env)
    assert r.returncode != 0 and "Invalid node name specified: nosuch" in r.stderr, r.stderr
    assert corral("reservation", "delete", "cli1", env=sh.env).returncode == 0
    assert sh.ok("scontrol show res") == "No reservations in the system\n"


def _utilization(sh: Shims) -> dict[str, int]:
    out = sh.ok("sreport -t seconds -nP cluster utilization start=now-1hour end=now+1hour")
    f = out.strip().split("|")
    return dict(zip(("alloc", "down", "pdown", "idle", "resv", "reported"),
                    (int(x) for x in f[1:7]), strict=True))


def test_sreport_down_and_reserved_from_node_history(sh: Shims) -> None:
    before = _utilization(sh)
    sh.ok("scontrol update NodeName=testnode State=DRAIN Reason=sreport-test")
    try:
        wait_for(lambda: "drain" in sh.ok("sinfo -h -N -o %t"), 10, what="drained")
        # down time grows while the node stays drained (16 CPUs a second)
        got = wait_for(lambda: (lambda u: u if u["down"] >= before["down"] + 16 else None)(
            _utilization(sh)), 20, interval=0.2, what="Down time")
    finally:
        sh.ok("scontrol update NodeName=testnode State=RESUME")
    assert got["idle"] <= before["idle"] + got["reported"] - before["reported"]
    sh.ok("scontrol create res ReservationName=acct StartTime=now Duration=5 "
          "Nodes=ALL Users=root")
    try:
        got = wait_for(lambda: (lambda u: u if u["resv"] >= before["resv"] + 16 else None)(
            _utilization(sh)), 20, interval=0.2, what="Reserved time")
        assert got["pdown"] == before["pdown"]  # not a maintenance reservation
    finally:
        sh.ok("scontrol delete reservation ReservationName=acct")
    stopped = _utilization(sh)["down"]
    assert _utilization(sh)["down"] == stopped  # resumed: no more down time


def test_flex_reservation_jobs_start_before_it(sh: Shims) -> None:
    assert sh.ok("scontrol create reservation ReservationName=flex StartTime=now+1hour "
                 "Duration=60 Nodes=testnode Users=root flags=flex") == \
        "Reservation created: flex\n"
    try:
        assert "Flags=FLEX,SPEC_NODES" in sh.ok("scontrol show reservation flex")
        plain = _jid(sh.ok("sbatch -t 5 --reservation=flex --wrap true"))
        assert sh.c.wait_done(plain)["state"] == "COMPLETED"  # an hour early: FLEX
        sh.ok("scontrol update ReservationName=flex Flags=-FLEX")
        held = _jid(sh.ok("sbatch -t 5 --reservation=flex --wrap true"))
        reason = wait_for(lambda: sh.ok(f"squeue -h -j {held} -o %r").strip() or None, 10)
        assert reason == "Reservation" and sh.c.job(held)["state"] == "PENDING"
        sh.ok(f"scancel {held}")
    finally:
        sh.ok("scontrol delete ReservationName=flex")


def test_flex_jobs_are_scheduled_before_jobs_without_a_reservation(sh: Shims) -> None:
    """Slurm's queue order: a job that asked for a reservation comes before the others
    (``sort_job_queue2``), so the FLEX job gets the node although the other job is older
    and was planned there; both wait behind a drained node first, so one cycle sees both."""
    sh.ok("scontrol update NodeName=testnode State=DRAIN Reason=flex-order")
    sh.ok("scontrol create reservation ReservationName=flexfirst StartTime=now+1hour "
          "Duration=60 Nodes=testnode Users=root flags=flex")
    try:
        older = _jid(sh.ok("sbatch -c 16 -t 5 --wrap 'sleep 30'"))
        mine = _jid(sh.ok("sbatch -c 16 -t 5 --reservation=flexfirst --wrap 'sleep 30'"))
        sh.ok("scontrol update NodeName=testnode State=RESUME")
        assert sh.c.wait_state(mine, "RUNNING")["state"] == "RUNNING"
        assert sh.c.job(older)["state"] == "PENDING"
        sh.ok(f"scancel {mine} {older}")
        for jid in (mine, older):
            sh.c.wait_done(jid)
    finally:
        sh.run("scontrol update NodeName=testnode State=RESUME")
        sh.ok("scontrol delete ReservationName=flexfirst")
