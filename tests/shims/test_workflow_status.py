"""Status queries as workflow tools make them (issue 20): ``squeue -u/--name/-j LIST``
answered by the controller's indexes, ``squeue -i`` iterating, and a finished job in
``sacct`` long after ``squeue`` dropped it (MinJobAge), a simulated week later, with ids
never reused after a restart. Real cluster, installed shims."""

from __future__ import annotations

import os
import pwd
import random
import re
import sqlite3
import subprocess
import time
from collections.abc import Iterator

import pytest

from tests.shims.harness import CONFIG, CORRAL, NODE, ShimCluster, stop_cluster

SUBMITTED = re.compile(r"^Submitted batch job (\d+)\n$")
WEEK_S = 7 * 86400


@pytest.fixture(scope="module")
def quick_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ShimCluster]:
    """A shim cluster whose finished jobs leave squeue after 1 s (MinJobAge=1)."""
    base = tmp_path_factory.mktemp("wfstatus")
    c = ShimCluster(base)
    c.first_job_id = random.SystemRandom().randrange(1_000_000, 60_000_000)
    cfg = base / "corral.toml"
    cfg.write_text(CONFIG.replace("{first_job_id}", str(c.first_job_id))
                   .replace("min_job_age_s = 600", "min_job_age_s = 1\ntick_s = 0.5"))
    up = c.run(*CORRAL, "up", "--detach", "--state-dir", str(c.state_dir), "--config",
               str(cfg), "--node-name", NODE, "--timeout", "60", timeout=90)
    assert up.returncode == 0, up.stdout + up.stderr
    inst = c.run(*CORRAL, "shims", "install", str(c.bin), "--force")
    assert inst.returncode == 0, inst.stderr
    try:
        yield c
    finally:
        stop_cluster(c)


def _submit(c: ShimCluster, *args: str) -> str:
    p = c.run("sbatch", *args)
    assert p.returncode == 0, p.stderr
    m = SUBMITTED.match(p.stdout)
    assert m, p.stdout
    return m.group(1)


def _poll(fn: object, timeout: float = 30.0) -> object:
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        last = fn()  # type: ignore[operator]
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out: {last!r}")


def test_squeue_by_user_name_and_id_list(quick_cluster: ShimCluster) -> None:
    c = quick_cluster
    me = pwd.getpwuid(os.getuid()).pw_name
    a = _submit(c, "--hold", "-J", "wf-alpha", "--wrap", "true")
    b = _submit(c, "--hold", "-J", "wf-beta", "--wrap", "true")
    try:
        p = c.run("squeue", "-h", "-u", me, "-o", "%i %j")
        assert p.returncode == 0 and {f"{a} wf-alpha", f"{b} wf-beta"} <= set(
            p.stdout.splitlines())
        p = c.run("squeue", "-h", "--name", "wf-alpha", "-o", "%i")
        assert p.stdout.split() == [a]
        p = c.run("squeue", "-h", "--name", "wf-alpha", "-u", "nobody", "-o", "%i")
        assert p.stdout == ""
        # a rename moves the job in the name index
        r = c.run("scontrol", "update", f"JobId={a}", "Name=wf-gamma")
        assert r.returncode == 0, r.stderr
        assert c.run("squeue", "-h", "--name", "wf-alpha", "-o", "%i").stdout == ""
        assert c.run("squeue", "-h", "--name", "wf-gamma", "-o", "%i").stdout.split() == [a]
        p = c.run("squeue", "-h", "-j", f"{a},{b}", "-o", "%i %T")
        assert sorted(p.stdout.splitlines()) == sorted([f"{a} PENDING", f"{b} PENDING"])
    finally:
        c.run("scancel", a, b)


def test_sacct_by_name_from_the_database(quick_cluster: ShimCluster) -> None:
    """sacct --name is answered by the controller from its name index (the API's
    ``names`` filter), finished and pending jobs alike."""
    c = quick_cluster
    a = _submit(c, "-J", "wf-acct-one", "--wrap", "true")
    b = _submit(c, "--hold", "-J", "wf-acct-two", "--wrap", "true")
    _submit(c, "--hold", "-J", "wf-acct-other", "--wrap", "true")
    try:
        _poll(lambda: c.run("sacct", "-n", "-X", "-j", a, "-o", "state").stdout.split()
              == ["COMPLETED"])
        p = c.run("sacct", "-n", "-X", "-P", "--name", "wf-acct-one,wf-acct-two",
                  "-o", "jobid,jobname,state")
        assert p.returncode == 0, p.stderr
        assert p.stdout.splitlines() == [f"{a}|wf-acct-one|COMPLETED",
                                         f"{b}|wf-acct-two|PENDING"]
        with c.client() as cl:
            assert [j["id"] for j in cl.history(names=["wf-acct-two"])] == [int(b)]
            assert cl.history(names=["wf-acct-none"]) == []
    finally:
        c.run("scancel", "-n", "wf-acct-two")
        c.run("scancel", "-n", "wf-acct-other")


def test_squeue_iterate(quick_cluster: ShimCluster) -> None:
    c = quick_cluster
    jid = _submit(c, "--hold", "-J", "wf-iter", "--wrap", "true")
    p = subprocess.Popen(["squeue", "-i", "1", "--name", "wf-iter", "-o", "%i %j"],
                         cwd=c.base, env=c.env, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        lines: list[str] = []
        t0 = time.monotonic()
        while sum(1 for ln in lines if ln.startswith(("Mon", "Tue", "Wed", "Thu", "Fri",
                                                      "Sat", "Sun"))) < 3:
            lines.append(p.stdout.readline().rstrip("\n"))
            assert time.monotonic() - t0 < 30, lines
        took = time.monotonic() - t0
    finally:
        p.terminate()
        p.wait(10)
        c.run("scancel", jid)
    # each report: the date, the header, the job, an empty line (as Slurm's squeue -i)
    first = lines[:4]
    assert re.match(r"^\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}$", first[0]), first
    assert first[1:] == ["JOBID NAME", f"{jid} wf-iter", ""], lines
    assert took >= 1.5  # the third date comes about 2 s after the first


def test_finished_job_in_sacct_a_week_later(quick_cluster: ShimCluster) -> None:
    c = quick_cluster
    jid = _submit(c, "-J", "wf-done", "--wrap", "exit 3")
    fmt = ("-X", "-n", "-P", "-o", "JobID,JobName,State,ExitCode")
    # Slurm's MinJobAge: squeue drops the finished job (here after 1 s); sacct keeps it
    _poll(lambda: c.run("squeue", "-h", "-j", jid).returncode == 1, 30)
    p = c.run("sacct", "-j", jid, *fmt)
    assert p.stdout.splitlines() == [f"{jid}|wf-done|FAILED|3:0"], p.stdout + p.stderr
    # a simulated week later: the job's times move 7 days back in the database
    db = sqlite3.connect(c.state_dir / "corral.db", timeout=30)
    with db:
        db.execute("UPDATE jobs SET submit_time = submit_time - ?, start_time = "
                   "start_time - ?, end_time = end_time - ? WHERE id = ?",
                   (WEEK_S, WEEK_S, WEEK_S, int(jid)))
    db.close()
    assert c.run("sacct", "-j", jid, *fmt).stdout.splitlines() == [
        f"{jid}|wf-done|FAILED|3:0"]
    end = c.run("sacct", "-j", jid, "-X", "-n", "-P", "-o", "End").stdout.strip()
    assert time.mktime(time.strptime(end, "%Y-%m-%dT%H:%M:%S")) < time.time() - WEEK_S + 60
    # not in today's default window; in one that reaches back 8 days
    assert jid not in c.run("sacct", "-X", "-n", "-P", "-o", "JobID").stdout.split()
    back = c.run("sacct", "-X", "-n", "-P", "-o", "JobID", "-S", "now-8days")
    assert jid in back.stdout.split(), back.stdout + back.stderr
    # job ids are never reused, across a controller restart too
    down = c.run(*CORRAL, "down", "--state-dir", str(c.state_dir), timeout=60)
    assert down.returncode == 0, down.stderr
    up = c.run(*CORRAL, "up", "--detach", "--state-dir", str(c.state_dir), "--config",
               str(c.base / "corral.toml"), "--node-name", NODE, "--timeout", "60",
               timeout=90)
    assert up.returncode == 0, up.stdout + up.stderr
    nxt = _submit(c, "-J", "wf-next", "--wrap", "true")
    assert int(nxt) > int(jid)
    assert c.run("sacct", "-j", jid, *fmt).stdout.splitlines() == [
        f"{jid}|wf-done|FAILED|3:0"]
