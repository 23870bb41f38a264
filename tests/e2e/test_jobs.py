"""Real jobs through a real controller and agent: lifecycle, env, arrays, dependencies."""

from __future__ import annotations

import json
import os
import time
import urllib.parse

import pytest

from corral.client import Client, CorralError
from tests.e2e.cluster import Cluster, corral, wait_for


def test_up_prints_how_to_submit_and_node_registered(cluster: Cluster) -> None:
    nodes = cluster.client.nodes()
    assert [n["name"] for n in nodes] == ["testnode"]
    assert nodes[0]["cpus"] == 16 and nodes[0]["state"] == "IDLE" and nodes[0]["connected"]
    parts = cluster.client.partitions()
    assert parts[0]["name"] == "main" and parts[0]["default"] and parts[0]["nodes"] == ["testnode"]
    me = cluster.client.whoami()
    assert me["uid"] == os.getuid() and me["via"] == "socket"


def test_submit_runs_to_completed_with_slurm_env(cluster: Cluster) -> None:
    script = "#!/bin/sh\necho out-$SLURM_JOB_ID\nenv | sort > env.$SLURM_JOB_ID\n"
    env = {"MYVAR": "kept", "PATH": "/usr/bin:/bin"}
    jid = cluster.client.submit(cluster.submission(script=script, name="envjob", env=env))[0]
    job = cluster.wait_done(jid)
    assert job["state"] == "COMPLETED" and job["exit_code"] == 0, job
    assert job["nodes"] == ["testnode"] and job["start_time"] >= job["submit_time"]
    assert (cluster.work / f"slurm-{jid}.out").read_text() == f"out-{jid}\n"
    env = dict(line.split("=", 1) for line in
               (cluster.work / f"env.{jid}").read_text().splitlines() if "=" in line)
    assert env["MYVAR"] == "kept"
    assert env["SLURM_JOB_ID"] == str(jid) and env["SLURM_JOB_NAME"] == "envjob"
    assert env["SLURM_JOB_NODELIST"] == "testnode" and env["SLURM_NNODES"] == "1"
    assert env["SLURM_NTASKS"] == "1" and env["SLURM_JOB_PARTITION"] == "main"
    assert env["SLURM_SUBMIT_DIR"] == str(cluster.work) and env["SLURM_RESTART_COUNT"] == "0"
    assert env["SLURM_JOB_UID"] == str(os.getuid()) and env["CORRAL_JOB_ID"] == str(jid)
    assert env["SLURM_MEM_PER_NODE"] == "100"  # default_mem_per_cpu_mb x 1 CPU


def test_failed_job_records_exit_code_and_history(cluster: Cluster) -> None:
    jid = cluster.submit("exit 3")
    job = cluster.wait_done(jid)
    assert job["state"] == "FAILED" and job["exit_code"] == 3
    hist = cluster.client.history(ids=[jid])
    assert [h["state"] for h in hist] == ["FAILED"]
    assert hist[0]["derived_exit"] == "3:0"


def test_cancel_running_and_pending(cluster: Cluster) -> None:
    run = cluster.submit("sleep 60")
    cluster.wait_state(run, "RUNNING")
    held = cluster.submit("true", hold=True)
    assert cluster.job(held)["reason"] == "JobHeldUser"
    res = cluster.client.cancel([run, held])
    assert all(r["ok"] for r in res), res
    job = cluster.wait_done(run, 15)
    assert job["state"] == "CANCELLED" and "cancelled by" in job["end_reason"]
    assert cluster.job(held)["state"] == "CANCELLED"
    again = cluster.client.cancel([held])
    assert not again[0]["ok"] and again[0]["code"] == "conflict"
    missing = cluster.client.cancel([99999999])
    assert not missing[0]["ok"] and missing[0]["code"] == "not_found"


def test_hold_release(cluster: Cluster) -> None:
    jid = cluster.submit("true", hold=True)
    job = cluster.job(jid)
    assert job["state"] == "PENDING" and job["hold"] == "USER"
    time.sleep(0.3)  # give the scheduler a chance to (wrongly) start it
    assert cluster.job(jid)["state"] == "PENDING"
    assert cluster.client.release([jid])[0]["ok"]
    assert cluster.wait_done(jid)["state"] == "COMPLETED"


def test_signal_reaches_running_job(cluster: Cluster) -> None:
    marker = cluster.work / "usr1.txt"
    jid = cluster.submit(f"trap 'echo got > {marker}' USR1; while true; do sleep 0.1; done")
    cluster.wait_state(jid, "RUNNING")
    wait_for(lambda: (cluster.state_dir / "agent" / "jobs" / str(jid) / "status.json").exists(),
             10, what="the job's supervisor status")
    time.sleep(0.2)  # the trap must be installed by the shell before the signal arrives
    assert cluster.client.cancel([jid], signal="USR1")[0]["ok"]
    wait_for(marker.exists, 10, what="the USR1 trap")
    assert cluster.job(jid)["state"] == "RUNNING"
    cluster.client.cancel([jid])
    assert cluster.wait_done(jid)["state"] == "CANCELLED"


def test_dependencies(cluster: Cluster) -> None:
    gate = cluster.work / "gate"
    a = cluster.submit(f"while [ ! -e {gate} ]; do sleep 0.05; done")
    ok = cluster.submit("true", dependency=_dep("afterok", a))
    notok = cluster.submit("true", dependency=_dep("afternotok", a))
    cluster.wait_state(a, "RUNNING")
    wait_for(lambda: cluster.job(ok)["reason"] == "Dependency", 10, what="Dependency reason")
    assert cluster.job(ok)["state"] == "PENDING"
    assert cluster.job(ok)["dependency"] == f"afterok:{a}"
    gate.write_text("go")
    assert cluster.wait_done(a)["state"] == "COMPLETED"
    assert cluster.wait_done(ok)["state"] == "COMPLETED"
    wait_for(lambda: cluster.job(notok)["reason"] == "DependencyNeverSatisfied", 10,
             what="DependencyNeverSatisfied")
    cluster.client.cancel([notok])


def _dep(kind: str, jid: int) -> object:
    from corral.core.model.job import Dependency, DependencyKind, DependencySpec

    return DependencySpec(items=(Dependency(DependencyKind(kind), (jid,)),))


def test_array_with_percent_limit(cluster: Cluster) -> None:
    log = cluster.work / "array.log"
    sub = cluster.submission(
        f"echo start $SLURM_ARRAY_TASK_ID >> {log}; sleep 0.4; "
        "echo $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID $SLURM_ARRAY_TASK_COUNT"
        " > task.$SLURM_ARRAY_TASK_ID",
        array="1-6%2", name="arr")
    res = cluster.client.submit_result(sub)
    ids = res["job_ids"]
    assert len(ids) == 6 and res["array_job_id"] == ids[0]
    top = 0

    def all_done() -> bool:
        nonlocal top
        jobs = cluster.client.jobs(ids=[ids[0]], include_finished=True)
        running = sum(1 for j in jobs if j["state"] == "RUNNING")
        top = max(top, running)
        return len(jobs) == 6 and all(j["state"] == "COMPLETED" for j in jobs)

    wait_for(all_done, 60, interval=0.05, what="all array tasks")
    assert top <= 2, f"the %2 limit was exceeded: {top} running at once"
    for k, jid in enumerate(ids, start=1):
        job = cluster.job(f"{ids[0]}_{k}")
        assert job["id"] == jid and job["job_id"] == f"{ids[0]}_{k}"
        assert (cluster.work / f"task.{k}").read_text().split() == [str(ids[0]), str(k), "6"]
        assert (cluster.work / f"slurm-{ids[0]}_{k}.out").exists()


def test_requeue_keeps_id_and_counts_restarts(cluster: Cluster) -> None:
    out = cluster.work / "requeue.txt"
    jid = cluster.submit(f"echo run $SLURM_RESTART_COUNT >> {out}; "
                         f"[ $SLURM_RESTART_COUNT -ge 1 ] || sleep 60")
    cluster.wait_state(jid, "RUNNING")
    wait_for(lambda: out.exists() and out.read_text(), 10, what="first run")
    assert cluster.client.requeue([jid])[0]["ok"]
    job = cluster.wait_done(jid, 30)
    assert job["state"] == "COMPLETED" and job["restarts"] == 1 and job["id"] == jid
    assert out.read_text().split("\n")[:2] == ["run 0", "run 1"]


def test_time_limit_gives_timeout(cluster: Cluster) -> None:
    jid = cluster.submit("sleep 60", time_limit_s=1)
    job = cluster.wait_done(jid, 20)
    assert job["state"] == "TIMEOUT", job


def test_admin_time_limit_change_reaches_running_job(cluster: Cluster) -> None:
    jid = cluster.submit("sleep 60", time_limit_s=600)
    cluster.wait_state(jid, "RUNNING")
    rec = cluster.client.update_job(jid, time_limit_s=1)
    assert rec["time_limit_s"] == 1
    assert cluster.wait_done(jid, 20)["state"] == "TIMEOUT"


def test_bad_input_gets_precise_errors(cluster: Cluster) -> None:
    with pytest.raises(CorralError) as e:
        cluster.client.submit(cluster.submission("true", partitions=("nope",)))
    assert e.value.code == "invalid" and "nope" in e.value.message
    assert e.value.slurm == "Invalid partition name specified"
    with pytest.raises(CorralError) as e:
        cluster.client.submit(cluster.submission("true", array="1-999999"))
    assert e.value.code == "invalid" and e.value.slurm == "Invalid job array specification"
    with pytest.raises(CorralError) as e:
        cluster.client.submit({"spec": {"name": "x", "bogus": 1}, "argv": ["true"]})
    assert e.value.code == "invalid" and "bogus" in e.value.message
    with pytest.raises(CorralError) as e:
        cluster.client.job(987654321)
    assert e.value.code == "not_found"
    with pytest.raises(CorralError) as e:
        cluster.client.submit(cluster.submission("true", cpus_per_task=64))
    assert e.value.code == "rejected", e.value


def test_queue_filters_and_fields(cluster: Cluster) -> None:
    a = cluster.submit("true", hold=True, name="qa")
    b = cluster.submit("true", hold=True, name="qb")
    jobs = cluster.client.jobs(states=["PENDING"], fields=["id", "name", "reason"])
    mine = [j for j in jobs if j["id"] in (a, b)]
    assert mine == [{"id": a, "name": "qa", "reason": "JobHeldUser"},
                    {"id": b, "name": "qb", "reason": "JobHeldUser"}]
    assert [j["id"] for j in cluster.client.jobs(name="qb")] == [b]
    cluster.client.cancel([a, b])


def test_metrics_endpoint(cluster: Cluster) -> None:
    import socket

    s = socket.socket(socket.AF_UNIX)
    s.connect(str(cluster.sock))
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    text = data.decode()
    assert " 200 " in text.split("\r\n")[0]
    assert "corral_scheduler_cycle_seconds_bucket" in text
    assert "corral_jobs_submitted_total" in text and "corral_jobs_ended_total" in text


def test_http_with_token(cluster: Cluster, tmp_path: object) -> None:
    """The same API over TCP needs a token; the token carries the identity."""
    tok = cluster.client.token()
    r = corral("token", env={**os.environ, "CORRAL_SOCKET": str(cluster.sock)})
    assert r.returncode == 0 and r.stdout.count(".") == 2
    assert tok.count(".") == 2
    cfg = json.loads(json.dumps(cluster.client.cluster_config()))
    assert cfg["cluster_name"] == "corral" and urllib.parse.quote(cfg["state_dir"])


def test_down_and_up_keep_jobs(cluster: Cluster) -> None:
    """Not a crash: a clean restart of the daemons loses nothing either."""
    held = cluster.submit("true", hold=True, name="survivor")
    cluster.client.close()
    r = corral("down", "--state-dir", str(cluster.state_dir))
    assert r.returncode == 0, r.stderr
    cluster.up()
    job = cluster.job(held)
    assert job["state"] == "PENDING" and job["name"] == "survivor" and job["hold"] == "USER"
    cluster.client.release([held])
    assert cluster.wait_done(held)["state"] == "COMPLETED"
    assert Client(socket_path=str(cluster.sock)).ping()["nodes_up"] == 1


def test_begin_time_and_estimated_start(cluster: Cluster) -> None:
    later = time.time() + 1.5
    jid = cluster.submit("true", begin_time=later)
    wait_for(lambda: cluster.job(jid)["reason"] == "BeginTime", 10, what="BeginTime reason")
    job = cluster.wait_done(jid, 20)
    assert job["state"] == "COMPLETED" and job["start_time"] >= later
    # a job that waits for resources gets a reason and an estimated start
    big = cluster.submit("sleep 30", ntasks=16, time_limit_s=60)
    cluster.wait_state(big, "RUNNING")
    nxt = cluster.submit("true", ntasks=16, time_limit_s=60)
    rec = wait_for(lambda: (lambda j: j if j["reason"] == "Resources" else None)(
        cluster.job(nxt)), 10, what="Resources reason")
    assert rec["est_start"] is not None and rec["est_start"] >= time.time() + 20
    assert rec["rank"] == 1
    cluster.client.cancel([big, nxt])


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_foreground_up_stops_on_ctrl_c(tmp_path: object, signame: str) -> None:
    """Ctrl-C, kill and a closed terminal all stop both daemons, not `corral up` alone."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from tests.e2e.cluster import ENTRY, TEST_CONFIG

    root = Path(str(tmp_path))
    (root / "c.toml").write_text(TEST_CONFIG)
    p = subprocess.Popen([sys.executable, "-c", ENTRY, "up", "--state-dir", str(root / "s"),
                          "--config", str(root / "c.toml"), "--node-name", "testnode"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert p.stdout is not None
        banner = ""
        for line in p.stdout:
            banner += line
            if "Press Ctrl-C" in line:
                break
        assert "is up" in banner and "corral submit" in banner, banner
        info = json.loads((root / "s" / "controller.json").read_text())
        agent_pid = int((root / "s" / "agent.pid").read_text())
        p.send_signal(getattr(signal, signame))
        out, _ = p.communicate(timeout=30)
        assert p.returncode == 0, out
        assert "stopping the cluster" in out and "a daemon exited" not in out, out
        from tests.e2e.cluster import _alive

        assert not _alive(int(info["pid"])) and not _alive(agent_pid)
        assert not (root / "s" / "corral.sock").exists()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for pid_file in (root / "s" / "agent.pid", root / "s" / "controller.json"):
            try:  # a failed run must not leave its daemons behind
                text = pid_file.read_text()
                os.kill(int(json.loads(text)["pid"]) if text.startswith("{") else int(text),
                        signal.SIGKILL)
            except (OSError, ValueError, KeyError):
                pass
