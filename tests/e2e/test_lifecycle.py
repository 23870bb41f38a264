"""Prolog, epilog, task prolog/epilog and the controller's prolog/epilog on a real cluster
(``corral up``): real scripts that record their environment, fail on a marker file, or
hang past the timeout; what that does to the job and the node."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import TEST_CONFIG, Cluster, wait_for

PROLOG = """#!/bin/sh
f="{root}/prolog-$SLURM_JOB_ID-$SLURM_RESTART_COUNT.env"
env > "$f.tmp" && mv "$f.tmp" "$f"
if [ -e "{root}/slow-prolog" ]; then exec /bin/sleep 30; fi
if [ -e "{root}/fail-prolog" ]; then echo "scratch not mounted"; exit 3; fi
exit 0
"""
EPILOG = """#!/bin/sh
env > "{root}/.e$$" && mv "{root}/.e$$" "{root}/epilog-$SLURM_JOB_ID.env"
if [ -e "{root}/fail-epilog" ]; then echo "cannot clean /tmp" >&2; exit 1; fi
"""
TASK_PROLOG = """#!/bin/sh
echo "export FROM_TASK_PROLOG=yes:$SLURM_JOB_ID"
echo "unset DROP_ME"
echo "print hello from the task prolog"
echo "something else"
"""
TASK_EPILOG = """#!/bin/sh
f="{root}/task-epilog-$SLURM_JOB_ID"
echo "$SLURM_JOB_ID $(id -u)" > "$f.tmp" && mv "$f.tmp" "$f"
"""
CTLD_PROLOG = """#!/bin/sh
f="{root}/ctld-prolog-$SLURM_JOB_ID-$SLURM_RESTART_COUNT.env"
env > "$f.tmp" && mv "$f.tmp" "$f"
if [ -e "{root}/fail-ctld-prolog" ]; then exit 2; fi
if [ -e "{root}/gate-ctld-prolog" ]; then
  while [ -e "{root}/gate-ctld-prolog" ]; do sleep 0.02; done
fi
"""
CTLD_EPILOG = """#!/bin/sh
env > "{root}/.ce$$" && mv "{root}/.ce$$" "{root}/ctld-epilog-$SLURM_JOB_ID.env"
"""


def _script(path: Path, text: str, root: Path) -> str:
    path.write_text(text.format(root=root))
    path.chmod(0o755)
    return str(path)


@pytest.fixture(scope="module")
def lc() -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="corral-life-"))
    out = root / "out"
    out.mkdir()
    os.chmod(out, 0o1777)
    progs = root / "progs"
    progs.mkdir()
    scripts = {name: _script(progs / name, text, out) for name, text in (
        ("prolog", PROLOG), ("epilog", EPILOG), ("task_prolog", TASK_PROLOG),
        ("task_epilog", TASK_EPILOG), ("prolog_slurmctld", CTLD_PROLOG),
        ("epilog_slurmctld", CTLD_EPILOG))}
    config = TEST_CONFIG + "\n[scripts]\n" + "".join(
        f'{k} = "{v}"\n' for k, v in scripts.items()) + "timeout_s = 2\n"
    c = Cluster(root, config=config)
    c.out = out  # type: ignore[attr-defined]
    c.up()
    try:
        yield c
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


def _env(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        k, eq, v = line.partition("=")
        if eq:
            out[k] = v
    return out


def _node(c: Cluster) -> dict[str, object]:
    return next(n for n in c.client.nodes() if n["name"] == "testnode")


def _resume(c: Cluster) -> None:
    c.client.resume("testnode")
    wait_for(lambda: _node(c)["state"] == "IDLE", 10, what="testnode back to IDLE")


def test_scripts_run_with_slurm_environment(lc: Cluster) -> None:
    out: Path = lc.out  # type: ignore[attr-defined]
    jid = lc.submit(script="#!/bin/sh\necho \"tp=$FROM_TASK_PROLOG drop=${DROP_ME:-unset}\"\n",
                    env={"PATH": "/usr/bin:/bin", "DROP_ME": "x", "SLURM_JOB_UID": "0",
                         "SECRET_OF_USER": "s3"},
                    stdout=str(out / "job-%j.out"))
    job = lc.wait_done(jid)
    assert job["state"] == "COMPLETED", job
    env = _env(out / f"prolog-{jid}-0.env")
    assert env["SLURM_JOB_ID"] == str(jid) and env["SLURM_JOBID"] == str(jid)
    assert env["SLURM_JOB_USER"] == "root" and env["SLURM_JOB_UID"] == "0"
    assert env["SLURM_JOB_NODELIST"] == "testnode" and env["SLURMD_NODENAME"] == "testnode"
    assert env["SLURM_JOB_PARTITION"] == "main"
    assert env["SLURM_SCRIPT_CONTEXT"] == "prolog_slurmd"
    assert "SECRET_OF_USER" not in env  # never the user's environment (it runs as root)
    # the task prolog's export/unset/print, before the script's own output
    text = (out / f"job-{jid}.out").read_text()
    assert text == f"hello from the task prolog\ntp=yes:{jid} drop=unset\n", text
    # the epilog and task epilog ran after the job; the controller's programs too
    wait_for(lambda: (out / f"epilog-{jid}.env").exists(), 10, what="the epilog")
    assert _env(out / f"epilog-{jid}.env")["SLURM_SCRIPT_CONTEXT"] == "epilog_slurmd"
    assert (out / f"task-epilog-{jid}").read_text().split() == [str(jid), "0"]
    ctld = _env(out / f"ctld-prolog-{jid}-0.env")
    assert ctld["SLURM_SCRIPT_CONTEXT"] == "prolog_slurmctld" and \
        ctld["SLURM_JOB_NODELIST"] == "testnode"
    wait_for(lambda: (out / f"ctld-epilog-{jid}.env").exists(), 10, what="EpilogSlurmctld")
    ended = _env(out / f"ctld-epilog-{jid}.env")
    assert ended["SLURM_JOB_EXIT_CODE2"] == "0:0" and ended["SLURM_JOB_STATE"] == "COMPLETED"
    # each node run is in the node's log
    log = (lc.state_dir / "agent" / "scripts.log").read_text()
    assert f"job {jid} prolog" in log and f"job {jid} epilog" in log
    assert _node(lc)["state"] == "IDLE"


def test_prolog_failure_requeues_held_and_drains(lc: Cluster) -> None:
    out: Path = lc.out  # type: ignore[attr-defined]
    (out / "fail-prolog").touch()
    try:
        jid = lc.submit("echo ran > " + str(out / "ran-x"))
        job = wait_for(lambda: (lambda j: j if j["restarts"] >= 1 and j["state"] == "PENDING"
                                else None)(lc.job(jid)), 20, what="the requeue")
        assert job["hold"] == "ADMIN" and job["reason"] == "JobHeldAdmin", job
        node = wait_for(lambda: (lambda n: n if n["state"] in ("DRAINED", "DRAINING")
                                 else None)(_node(lc)), 10, what="the drain")
        assert node["reason"] == "Prolog error"
        assert not (out / "ran-x").exists()  # the job itself never started
        log = (lc.state_dir / "agent" / "scripts.log").read_text()
        assert f"job {jid} prolog" in log and "exit 3" in log and "scratch not mounted" in log
    finally:
        (out / "fail-prolog").unlink()
    _resume(lc)
    lc.client.release([str(jid)])
    assert lc.wait_done(jid)["state"] == "COMPLETED"
    assert (out / "ran-x").exists()


def test_prolog_timeout_counts_as_failure(lc: Cluster) -> None:
    out: Path = lc.out  # type: ignore[attr-defined]
    (out / "slow-prolog").touch()
    try:
        jid = lc.submit("true")
        wait_for(lambda: lc.job(jid)["restarts"] >= 1, 20, what="the requeue")
        assert wait_for(lambda: _node(lc)["reason"], 10) == "Prolog error"
        log = (lc.state_dir / "agent" / "scripts.log").read_text()
        assert "timed out after 2 s" in log
    finally:
        (out / "slow-prolog").unlink()
    lc.client.cancel([str(jid)])
    _resume(lc)


def test_epilog_failure_drains_but_the_job_stands(lc: Cluster) -> None:
    out: Path = lc.out  # type: ignore[attr-defined]
    (out / "fail-epilog").touch()
    try:
        jid = lc.submit("exit 0")
        assert lc.wait_done(jid)["state"] == "COMPLETED"
        node = wait_for(lambda: (lambda n: n if n["reason"] else None)(_node(lc)), 10,
                        what="the drain")
        assert node["reason"] == "Epilog error" and node["state"] == "DRAINED"
    finally:
        (out / "fail-epilog").unlink()
    _resume(lc)


def test_controller_prolog_failure_requeues(lc: Cluster) -> None:
    out: Path = lc.out  # type: ignore[attr-defined]
    (out / "fail-ctld-prolog").touch()
    try:
        jid = lc.submit("true")
        job = wait_for(lambda: (lambda j: j if j["restarts"] >= 1 else None)(lc.job(jid)),
                       20, what="the requeue")
        assert job["hold"] in ("NONE", None, ""), job  # requeued, not held
    finally:
        (out / "fail-ctld-prolog").unlink()
    assert lc.wait_done(jid)["state"] == "COMPLETED"
    assert _node(lc)["state"] == "IDLE"  # the node is not to blame


HEALTH = """#!/bin/sh
echo run >> "{root}/health-runs"
if [ -e "{root}/sick" ]; then echo "checking disks"; echo "NHC: /scratch is not mounted"; exit 1; fi
echo "all good"
"""


def _runs(out: Path) -> int:
    try:
        return len((out / "health-runs").read_text().splitlines())
    except FileNotFoundError:
        return 0


def test_health_check_drains_and_returns_only_its_own_drain() -> None:
    root = Path(tempfile.mkdtemp(prefix="corral-health-"))
    out = root / "out"
    out.mkdir()
    prog = _script(root / "health", HEALTH, out)
    c = Cluster(root, config=TEST_CONFIG + f'\n[health_check]\nprogram = "{prog}"\n'
                "interval_s = 1\n")
    c.up()
    try:
        wait_for(lambda: _runs(out) >= 1, 15, what="the check at registration")
        assert _node(c)["state"] == "IDLE"
        (out / "sick").touch()
        node = wait_for(lambda: (lambda n: n if n["state"] == "DRAINED" else None)(_node(c)),
                        15, what="the drain by the health check")
        assert node["reason"] == "NHC: /scratch is not mounted"
        jid = c.submit("true")  # a drained node runs nothing
        assert c.wait_state(jid, "PENDING")["state"] == "PENDING"
        (out / "sick").unlink()
        wait_for(lambda: _node(c)["state"] == "IDLE", 15, what="the node back")
        assert c.wait_done(jid)["state"] == "COMPLETED"
        # an operator's drain is never lifted by a passing check
        c.client.drain("testnode", "maintenance")
        seen = _runs(out)
        wait_for(lambda: _runs(out) >= seen + 2, 15, what="two more checks")
        node = _node(c)
        assert node["state"] == "DRAINED" and node["reason"] == "maintenance"
        # and a failing check does not overwrite the operator's reason
        (out / "sick").touch()
        seen = _runs(out)
        wait_for(lambda: _runs(out) >= seen + 2, 15, what="two failing checks")
        assert _node(c)["reason"] == "maintenance"
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


MAIL = """#!/bin/sh
printf '%s|%s|%s|%s|%s\\n' "$1" "$2" "$3" "$SLURM_JOB_MAIL_TYPE" "$SLURM_JOB_STATE" \\
    >> "{root}/mail.log"
"""


def test_mail_through_mail_prog() -> None:
    from corral.client import CorralError

    root = Path(tempfile.mkdtemp(prefix="corral-mail-"))
    out = root / "out"
    out.mkdir()
    prog = _script(root / "mail", MAIL, out)
    c = Cluster(root, config=TEST_CONFIG + f'\n[scripts]\nmail_prog = "{prog}"\n'
                'mail_domain = "example.org"\n')
    c.up()
    try:
        ok = c.submit("true", name="mailme", extra={"mail_type": "ALL", "mail_user": "ann"})
        assert c.wait_done(ok)["state"] == "COMPLETED"
        bad = c.submit("exit 3", name="boom", extra={"mail_type": "FAIL"})
        assert c.wait_done(bad)["state"] == "FAILED"
        quiet = c.submit("true", extra={"mail_type": "BEGIN,END", "mail_user": "x@y.z"},
                         hold=True)
        c.client.cancel([quiet])
        lines = wait_for(lambda: (lambda t: t if len(t) >= 4 else None)(
            (out / "mail.log").read_text().splitlines()
            if (out / "mail.log").exists() else []), 15, what="four mails")
        mails = sorted(lines)
        began = [m for m in mails if f"Job_id={ok} " in m and "|Began|" in m]
        ended = [m for m in mails if f"Job_id={ok} " in m and "|Ended|" in m]
        assert len(began) == 1 and began[0].startswith(
            f"-s|Slurm Job_id={ok} Name=mailme Began, Queued time 00:00:")
        assert began[0].endswith("|ann@example.org|Began|RUNNING"), began
        assert len(ended) == 1 and ", COMPLETED, ExitCode 0|ann@example.org|Ended|" in ended[0]
        failed = [m for m in mails if f"Job_id={bad} " in m]
        assert len(failed) == 1 and ", FAILED, ExitCode 3|root@example.org|Failed|FAILED" \
            in failed[0], failed
        cancelled = [m for m in mails if f"Job_id={quiet} " in m]
        assert len(cancelled) == 1 and "Ended, Run time 00:00:00, CANCELLED" in cancelled[0] \
            and "|x@y.z|" in cancelled[0], cancelled
        with pytest.raises(CorralError) as err:
            c.submit("true", extra={"mail_type": "END", "mail_user": "-oProxyCommand=x"})
        assert err.value.slurm == "Invalid --mail-user specification"
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


def test_job_is_configuring_while_prolog_slurmctld_runs(lc: Cluster) -> None:
    out: Path = lc.out  # type: ignore[attr-defined]
    gate = out / "gate-ctld-prolog"
    gate.touch()  # the controller's prolog waits until it is gone (timeout_s 2)
    try:
        jid = lc.submit("true")
        job = wait_for(lambda: (lambda j: j if j.get("configuring") else None)(lc.job(jid)),
                       1.5, interval=0.01, what="CONFIGURING while the prolog runs")
        assert job["state"] == "RUNNING" and job["state_short"] == "CF"
    finally:
        gate.unlink()
    done = lc.wait_done(jid)
    assert done["state"] == "COMPLETED" and not done["configuring"], done


def test_cancel_while_prolog_slurmctld_runs(lc: Cluster) -> None:
    """A job cancelled while the controller's prolog runs never reaches an agent: it ends
    CANCELLED when the prolog is done (it used to stay RUNNING, waiting for an exit)."""
    out: Path = lc.out  # type: ignore[attr-defined]
    gate = out / "gate-ctld-prolog"
    gate.touch()
    try:
        jid = lc.submit("true")
        wait_for(lambda: lc.job(jid).get("configuring"), 1.5, interval=0.01,
                 what="CONFIGURING while the prolog runs")
        lc.client.cancel([jid])
    finally:
        gate.unlink()
    done = lc.wait_done(jid)
    assert done["state"] == "CANCELLED" and done["end_reason"].startswith("cancelled by"), done
    assert not (out / f"task-epilog-{jid}").exists()  # it never ran on the node
    wait_for(lambda: _node(lc)["state"] == "IDLE", 10, what="testnode free again")
