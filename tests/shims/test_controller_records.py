"""What the shims show from the controller's own records: steps, allocations, partitions,
who cancelled, commands, open mode (real `corral up` cluster, installed commands)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.shims.harness import ShimCluster

SUBMITTED = re.compile(r"^Submitted batch job (\d+)\n$")


def _sbatch(c: ShimCluster, *args: str, cwd: Path) -> str:
    p = c.run("sbatch", *args, cwd=cwd)
    assert p.returncode == 0, p.stderr
    m = SUBMITTED.match(p.stdout)
    assert m, p.stdout
    return m.group(1)


def _done(c: ShimCluster, jid: str) -> dict:  # type: ignore[type-arg]
    return c.wait_job(jid, lambda r: r["state"] not in ("PENDING", "RUNNING", "COMPLETING"))


def test_sacct_shows_srun_steps_from_the_controller(shim_cluster: ShimCluster,
                                                     tmp_path: Path) -> None:
    c = shim_cluster
    (tmp_path / "steps.sh").write_text(
        "#!/bin/bash\n#SBATCH -n 2\n#SBATCH -J with_steps\n"
        "srun true\nsrun -n1 false\nsrun -n1 bash -c 'echo step=$SLURM_STEP_ID'\nexit 0\n")
    jid = _sbatch(c, "steps.sh", cwd=tmp_path)
    assert _done(c, jid)["state"] == "COMPLETED"
    assert (tmp_path / f"slurm-{jid}.out").read_text().splitlines()[-1] == "step=2"
    # the same shape as shared/compat/slurm-22.05/sacct_acct_parsable2_steps.txt
    p = c.run("sacct", "-o", "JobID,State,ExitCode,NodeList", "--parsable2", "-j", jid)
    assert p.stdout.splitlines() == [
        "JobID|State|ExitCode|NodeList", f"{jid}|COMPLETED|0:0|{c.node}",
        f"{jid}.batch|COMPLETED|0:0|{c.node}", f"{jid}.0|COMPLETED|0:0|{c.node}",
        f"{jid}.1|FAILED|1:0|{c.node}", f"{jid}.2|COMPLETED|0:0|{c.node}"], p.stderr
    p = c.run("sacct", "-P", "-n", "-o", "JobID,JobName,NTasks", "-j", jid)
    assert p.stdout.splitlines()[2:] == [f"{jid}.0|true|2", f"{jid}.1|false|1",
                                         f"{jid}.2|bash|1"]
    # -X: allocations only
    p = c.run("sacct", "-X", "-P", "-n", "-o", "JobID", "-j", jid)
    assert p.stdout == f"{jid}\n"


def test_allocation_outside_a_job_has_a_step_and_no_batch_row(shim_cluster: ShimCluster,
                                                              tmp_path: Path) -> None:
    c = shim_cluster
    p = c.run("srun", "-n", "1", "bash", "-c", "echo $SLURM_JOB_ID", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    jid = p.stdout.strip()
    rec = _done(c, jid)
    assert rec["interactive"] is True and rec["command"] == "bash -c echo $SLURM_JOB_ID"
    p = c.run("sacct", "-P", "-n", "-o", "JobID,JobName,State", "-j", jid)
    assert p.stdout.splitlines() == [f"{jid}|bash|COMPLETED", f"{jid}.0|bash|COMPLETED"]
    p = c.run("scontrol", "show", "job", jid)
    assert "BatchFlag=0" in p.stdout


def test_pending_job_shows_the_default_partition(shim_cluster: ShimCluster,
                                                 tmp_path: Path) -> None:
    c = shim_cluster
    jid = _sbatch(c, "--hold", "--wrap=true", cwd=tmp_path)
    try:
        with c.client() as cl:
            assert cl.job(jid)["partition"] == "debug"  # the cluster's default
            assert cl.jobs(ids=[jid])[0]["partition"] == "debug"
        p = c.run("squeue", "-h", "-j", jid, "-o", "%P")
        assert p.stdout.strip() == "debug"
    finally:
        c.run("scancel", jid)


def test_cancelled_by_uid_and_command(shim_cluster: ShimCluster, tmp_path: Path) -> None:
    c = shim_cluster
    (tmp_path / "job.sh").write_text("#!/bin/sh\nsleep 60\n")
    jid = _sbatch(c, "job.sh", cwd=tmp_path)
    with c.client() as cl:
        assert cl.job(jid)["command"] == str(tmp_path / "job.sh")
    c.wait_job(jid, lambda r: r["state"] == "RUNNING")
    assert c.run("scancel", jid).returncode == 0
    rec = _done(c, jid)
    assert rec["state"] == "CANCELLED" and rec["cancelled_by_uid"] == os.getuid()
    env = dict(c.env, CORRAL_SACCT_CANCELLED_BY="1")
    p = c.run("sacct", "-X", "-P", "-n", "-o", "State", "-j", jid, env=env)
    assert p.stdout == f"CANCELLED by {os.getuid()}\n"
    p = c.run("sacct", "-X", "-P", "-n", "-o", "State", "-j", jid)
    assert p.stdout == "CANCELLED\n"


def test_open_mode_reaches_the_job(shim_cluster: ShimCluster, tmp_path: Path) -> None:
    c = shim_cluster
    probe = "echo mode=${SLURM_OPEN_MODE-unset}"
    jobs = {
        "append": _sbatch(c, "--open-mode=append", f"--wrap={probe}", cwd=tmp_path),
        "truncate": _sbatch(c, "--open-mode=truncate", f"--wrap={probe}", cwd=tmp_path),
        "default": _sbatch(c, f"--wrap={probe}", cwd=tmp_path),
    }
    want = {"append": "mode=a", "truncate": "mode=t", "default": "mode=unset"}
    for key, jid in jobs.items():
        assert _done(c, jid)["state"] == "COMPLETED"
        assert (tmp_path / f"slurm-{jid}.out").read_text().strip() == want[key]


def test_sacct_selects_steps_and_shows_their_usage(shim_cluster: ShimCluster,
                                                  tmp_path: Path) -> None:
    c = shim_cluster
    burn = "x=0; while [ $x -lt 60000 ]; do x=$((x+1)); done"
    (tmp_path / "usage.sh").write_text(
        "#!/bin/bash\n#SBATCH -n 2\n#SBATCH -J usage\n"
        "export CORRAL_SRUN_LAUNCH=agents\n"  # through the agent: srun reports the usage
        f"srun -n2 true\nsrun -n1 bash -c '{burn}'\nexit 0\n")
    jid = _sbatch(c, "usage.sh", cwd=tmp_path)
    assert _done(c, jid)["state"] == "COMPLETED"
    # the step's usage is recorded per node and in the history record
    with c.client() as cl:
        steps = cl.job(jid)["steps"]
        hist = cl.history(ids=[jid], all_users=True)[0]["steps"]
    assert [s["step_id"] for s in steps] == [0, 1] and hist[1]["usage"] == steps[1]["usage"]
    use = steps[1]["usage"]
    assert set(use["nodes"]) == {c.node} and len(use["nodes"][c.node]["pids"]) == 1
    assert use["cpu_time_s"] > 0 and use["max_rss_mb"] > 0 and steps[1]["node_tasks"] == [[0]]
    # -j J.1: only that step, its usage in Slurm's units
    p = c.run("sacct", "-j", f"{jid}.1", "-P", "-o", "JobID,NodeList,NTasks,MaxRSS,TotalCPU")
    lines = p.stdout.splitlines()
    assert p.returncode == 0 and lines[0] == "JobID|NodeList|NTasks|MaxRSS|TotalCPU", p.stderr
    assert len(lines) == 2, lines
    step, nodes, ntasks, rss, cpu = lines[1].split("|")
    assert (step, nodes, ntasks) == (f"{jid}.1", c.node, "1")
    assert re.fullmatch(r"\d+(\.\d\d)?[KMG]", rss), rss
    assert re.fullmatch(r"\d\d:\d\d[.:]\d\d\d?", cpu) and cpu != "00:00:00", cpu
    p = c.run("sacct", "-j", f"{jid}.batch", "-P", "-n", "-o", "JobID,NodeList,NTasks")
    assert p.stdout.splitlines() == [f"{jid}.batch|{c.node}|1"], p.stderr
    p = c.run("sacct", "-j", f"{jid}.0,{jid}.batch", "-P", "-n", "-o", "JobID,NTasks")
    assert p.stdout.splitlines() == [f"{jid}.batch|1", f"{jid}.0|2"], p.stderr
    # an unknown step: the header only (nothing with -n), exit 0, as Slurm
    p = c.run("sacct", "-j", f"{jid}.99", "-P", "-o", "JobID,State")
    assert (p.stdout, p.returncode) == ("JobID|State\n", 0), p.stderr
    p = c.run("sacct", "-j", f"{jid}.99", "-P", "-n")
    assert (p.stdout, p.stderr, p.returncode) == ("", "", 0)


def test_step_end_usage_is_checked(shim_cluster: ShimCluster, tmp_path: Path) -> None:
    from corral.client import CorralError

    c = shim_cluster
    jid = _sbatch(c, "--wrap=sleep 60", cwd=tmp_path)
    try:
        c.wait_job(jid, lambda r: r["state"] == "RUNNING")
        with c.client() as cl:
            sid = cl.start_step(jid, ["work"], ntasks=1, nodes=[c.node])
            url = f"/jobs/{jid}/steps/{sid}/end"
            node = c.node
            for usage, field in (
                    ([1, 2], "bad field usage"),
                    ({"nodes": []}, "usage.nodes"),
                    ({"nodes": {"elsewhere": {}}}, "'elsewhere' is not a node"),
                    ({"nodes": {node: {"cpu_time_s": -1}}}, "cpu_time_s"),
                    ({"nodes": {node: {"max_rss_mb": "big"}}}, "max_rss_mb"),
                    ({"nodes": {node: {"cpu_time_s": float("inf")}}}, "cpu_time_s"),
                    ({"nodes": {node: {"max_rss_mb": True}}}, "max_rss_mb"),
                    ({"nodes": {node: {"pids": [1, 2]}}}, "pids"),  # one task
                    ({"nodes": {node: {"pids": ["x"]}}}, "pids"),
                    ({"nodes": {node: {"node": "other"}}}, ".node"),
                    ({"nodes": {node: []}}, f"usage.nodes.{node}"),
                    ({"cpu_time_s": -0.5}, "usage.cpu_time_s")):
                with pytest.raises(CorralError) as err:
                    cl.request("POST", url, {"exit_code": 0, "usage": usage})
                assert err.value.status == 400 and err.value.code == "invalid", usage
                assert field in err.value.message, (usage, err.value.message)
            assert cl.job(jid)["steps"][0]["end_time"] is None  # nothing was recorded
            done = cl.end_step(jid, sid, usage={"nodes": {node: {
                "node": node, "cpu_time_s": 1.5, "max_rss_mb": 3.0, "pids": [4242]}}})
        assert done["state"] == "COMPLETED" and done["cpu_time_s"] == 1.5
        assert done["usage"]["nodes"][node]["pids"] == [4242]
        p = c.run("sacct", "-j", f"{jid}.{sid}", "-P", "-n",
                  "-o", "JobID,TotalCPU,MaxRSS,MaxRSSNode,MaxRSSTask,AveCPU")
        assert p.stdout.splitlines() == [f"{jid}.{sid}|00:01.500|3M|{node}||00:00:01"]
    finally:
        c.run("scancel", jid)


def test_a_step_end_carries_why_its_tasks_could_not_start(shim_cluster: ShimCluster,
                                                          tmp_path: Path) -> None:
    """srun's end report names the error of a container that could not be made; the
    step record keeps it (the Pod's CreateContainerError), and its stored row too."""
    from types import SimpleNamespace

    from corral.client import CorralError
    from corral.controller.steprecord import StepRecord

    c = shim_cluster
    jid = _sbatch(c, "--wrap=sleep 60", cwd=tmp_path)
    try:
        c.wait_job(jid, lambda r: r["state"] == "RUNNING")
        with c.client() as cl:
            sid = cl.start_step(jid, [], ntasks=1, nodes=[c.node])
            url = f"/jobs/{jid}/steps/{sid}/end"
            with pytest.raises(CorralError) as err:
                cl.request("POST", url, {"exit_code": 1, "error": ["no"]})
            assert err.value.code == "invalid" and "error must be a string" in \
                err.value.message
            done = cl.request("POST", url, {"exit_code": 1, "error": "no command specified"})
            assert (done["state"], done["error"]) == ("FAILED", "no command specified")
            assert cl.job(jid)["steps"][0]["error"] == "no command specified"
    finally:
        c.run("scancel", jid)
    st = StepRecord(1, 0, 0, "pod", [], 1, ["n"], 1, 0.0, error="why")
    row = SimpleNamespace(**st.insert_row())
    assert StepRecord.from_row(row).error == "why"
    assert StepRecord.from_row(SimpleNamespace(**StepRecord(
        1, 0, 1, "p", ["x"], 1, ["n"], 1, 0.0).insert_row())).to_api()["error"] is None
