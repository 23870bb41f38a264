"""What the shims show from the controller's own records: steps, allocations, partitions,
who cancelled, commands, open mode (real `corral up` cluster, installed commands)."""

from __future__ import annotations

import os
import re
from pathlib import Path

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
