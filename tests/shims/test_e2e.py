"""The shims as installed commands against a real `corral up` cluster (real processes)."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from tests.shims.fakes import captured
from tests.shims.harness import ShimCluster

SUBMITTED = re.compile(r"^Submitted batch job (\d+)\n$")


def submit(c: ShimCluster, *args: str, cwd: Path, input: str | None = None) -> str:
    p = c.run("sbatch", *args, cwd=cwd, input=input)
    assert p.returncode == 0, p.stderr
    m = SUBMITTED.match(p.stdout)
    assert m, p.stdout
    return m.group(1)


def done(c: ShimCluster, jid: str) -> dict:  # type: ignore[type-arg]
    return c.wait_job(jid, lambda r: r["state"] not in ("PENDING", "RUNNING", "COMPLETING"))


@pytest.mark.parametrize("name", [
    "err_sbatch_invalid_partition.txt", "err_sbatch_bad_option.txt", "err_sbatch_bad_time.txt",
    "err_sbatch_bad_time_2.txt", "err_sbatch_bad_array_spec.txt", "err_sbatch_array_too_big.txt",
    "err_sbatch_bad_dependency_syntax.txt", "err_sbatch_missing_file.txt",
    "err_sbatch_too_much_memory.txt", "err_scancel_bad_id.txt", "err_scancel_nonexistent.txt",
    "err_scontrol_release_nonexistent.txt", "err_scontrol_show_job_nonexistent.txt",
    "err_squeue_j_nonexistent.txt", "err_squeue_p_nonexistent.txt",
])
def test_captured_errors(shim_cluster: ShimCluster, tmp_path: Path, name: str) -> None:
    argv, expected, rc = captured(name)
    cmd = Path(name).stem.split("_")[1]
    p = shim_cluster.run(cmd, *argv, cwd=tmp_path)
    assert p.returncode == rc, (p.stdout, p.stderr)
    # Slurm's own line is there; Corral may add a first line saying exactly why
    want = expected.splitlines()
    got = (p.stdout + p.stderr).splitlines()
    if not want:
        assert got == []
        return
    assert got and want[-1] == got[-1], got
    assert set(want) <= set(got) or want[-1].startswith("sbatch: error: Batch job"), got


def test_stdin_and_shebang_errors(shim_cluster: ShimCluster, tmp_path: Path) -> None:
    p = shim_cluster.run("sbatch", cwd=tmp_path, input="")
    assert (p.returncode, p.stderr) == (1, "sbatch: error: Batch script is empty!\n")
    (tmp_path / "noshebang.sh").write_text("echo no shebang\n")
    _, expected, rc = captured("err_sbatch_not_a_script.txt")
    p = shim_cluster.run("sbatch", "noshebang.sh", cwd=tmp_path)
    assert (p.stderr, p.returncode) == (expected, rc)


def test_accepted_oddities(shim_cluster: ShimCluster, tmp_path: Path) -> None:
    # a dependency on a job that never existed is dropped (Slurm: Dependency=(null))
    jid = submit(shim_cluster, "--dependency=afterok:999999", "--wrap=true", cwd=tmp_path)
    assert done(shim_cluster, jid)["state"] == "COMPLETED"
    # impossible sizes are refused at submit (Slurm would queue them forever)
    for args in (["-n", "1000"], ["-c", "100"], ["-N", "2"]):
        p = shim_cluster.run("sbatch", *args, "--wrap=true", cwd=tmp_path)
        assert p.returncode == 1 and "Batch job submission failed" in p.stderr, p.stderr
    # a reservation that does not exist is refused, never ignored
    p = shim_cluster.run("sbatch", "--reservation=maint", "--wrap=true", cwd=tmp_path)
    assert p.returncode == 1 and p.stderr.endswith(
        "sbatch: error: Batch job submission failed: Requested reservation is invalid\n")
    assert "reservation 'maint' does not exist" in p.stderr


def test_job_ids_start_at_first_job_id(shim_cluster: ShimCluster, tmp_path: Path) -> None:
    jid = int(submit(shim_cluster, "--hold", "--wrap=true", cwd=tmp_path))
    assert jid >= shim_cluster.first_job_id > 1
    p = shim_cluster.run("scontrol", "show", "config", cwd=tmp_path)
    assert f"FirstJobId              = {shim_cluster.first_job_id}" in p.stdout.splitlines()
    assert "MinJobAge               = 600 sec" in p.stdout.splitlines()
    assert "KillWait                = 3 sec" in p.stdout.splitlines()
    assert shim_cluster.run("scancel", str(jid), cwd=tmp_path).returncode == 0


def test_batch_job_lifecycle(shim_cluster: ShimCluster, tmp_path: Path) -> None:
    c = shim_cluster
    (tmp_path / "job.sh").write_text(
        "#!/bin/bash\n#SBATCH -J lifecycle\n#SBATCH -t 00:05:00\n"
        "echo out $SLURM_JOB_ID $SLURM_JOB_NAME\nexit 3\n")
    jid = submit(c, "job.sh", cwd=tmp_path)
    (tmp_path / "job.sh").unlink()  # the script was captured at submit time
    rec = done(c, jid)
    assert (rec["state"], rec["exit_code"]) == ("FAILED", 3)
    assert (tmp_path / f"slurm-{jid}.out").read_text() == f"out {jid} lifecycle\n"
    p = c.run("sacct", "-o", "JobID,State,ExitCode", "--parsable2", "-j", jid)
    assert p.stdout.splitlines() == ["JobID|State|ExitCode", f"{jid}|FAILED|3:0",
                                     f"{jid}.batch|FAILED|3:0"]
    p = c.run("squeue", "-h", "-t", "all", "-j", jid, "-o", "%i %T %r")
    assert p.stdout == f"{jid} FAILED NonZeroExitCode\n"
    p = c.run("scontrol", "show", "job", jid)
    assert f"JobId={jid} JobName=lifecycle\n" in p.stdout
    assert "JobState=FAILED Reason=NonZeroExitCode" in p.stdout
    assert "ExitCode=3:0" in p.stdout and "TimeLimit=00:05:00" in p.stdout
    _, expected, rc = captured("err_scontrol_hold_finished.txt")
    p = c.run("scontrol", "hold", jid)
    assert p.returncode == rc and p.stderr == expected.replace(" 8\n", f" {jid}\n")
    _, expected, rc = captured("err_scancel_finished.txt")  # a finished job: silent, exit 0
    p = c.run("scancel", jid)
    assert (p.returncode, p.stdout, p.stderr) == (rc, "", expected) == (0, "", "")


def test_hold_release_cancel_pending(shim_cluster: ShimCluster, tmp_path: Path) -> None:
    c = shim_cluster
    jid = submit(c, "--hold", "--wrap=sleep 60", cwd=tmp_path)
    p = c.run("squeue", "-h", "-j", jid, "-o", "%i|%t|%r")
    assert p.stdout == f"{jid}|PD|JobHeldUser\n"
    assert c.run("scontrol", "release", jid).returncode == 0
    c.wait_job(jid, lambda r: r["state"] == "RUNNING")
    assert c.run("scancel", jid).returncode == 0
    assert done(c, jid)["state"] == "CANCELLED"
    p = c.run("sacct", "-X", "-n", "-P", "-o", "State", "-j", jid)
    assert p.stdout == "CANCELLED\n"


def test_srun_steps_in_a_batch_job(shim_cluster: ShimCluster, tmp_path: Path) -> None:
    c = shim_cluster
    (tmp_path / "steps.sh").write_text(
        "#!/bin/bash\n#SBATCH -n 3\n#SBATCH -o main.out\n"
        "srun -l bash -c 'echo $SLURM_PROCID/$SLURM_NTASKS/$SLURM_LOCALID/$SLURM_NODEID/"
        "$SLURM_STEP_ID'\n"
        "srun --output=task-%j-%s-%t.out bash -c 'echo rank $SLURM_PROCID'\n"
        "echo piped | srun -n1 cat\n"
        "srun -n2 --input=none bash -c 'cat; echo nothing-$SLURM_PROCID'\n"
        "srun -n1 bash -c 'exit 4'; echo step-rc=$?\n")
    jid = submit(c, "steps.sh", cwd=tmp_path)
    assert done(c, jid)["state"] == "COMPLETED"
    lines = (tmp_path / "main.out").read_text().splitlines()
    assert sorted(lines[:3]) == ["0: 0/3/0/0/0", "1: 1/3/1/0/0", "2: 2/3/2/0/0"]
    assert "piped" in lines
    assert sorted(x for x in lines if x.startswith("nothing-")) == ["nothing-0", "nothing-1"]
    assert "step-rc=4" in lines
    assert any(x.endswith("task 0: Exited with exit code 4") for x in lines)
    for t in range(3):
        assert (tmp_path / f"task-{jid}-1-{t}.out").read_text() == f"rank {t}\n"


def test_squeue_steps_lists_running_steps(shim_cluster: ShimCluster, tmp_path: Path) -> None:
    c = shim_cluster
    (tmp_path / "gate").mkdir()
    (tmp_path / "st.sh").write_text(
        "#!/bin/bash\n#SBATCH -n 2\n#SBATCH -J stepper\n"
        "srun -n1 true\n"  # step 0: ends at once
        "srun -n2 -J worker bash -c 'echo up > gate/up.$SLURM_PROCID; "
        "while [ ! -e gate/stop ]; do sleep 0.05; done'\n")
    jid = submit(c, "st.sh", cwd=tmp_path)
    c.wait_file(tmp_path / "gate" / "up.1")
    c.wait_file(tmp_path / "gate" / "up.0")
    try:
        p = c.run("squeue", "-s")
        assert p.returncode == 0, p.stderr
        lines = p.stdout.splitlines()
        assert lines[0] == "         STEPID     NAME PARTITION     USER      TIME NODELIST"
        ids = [line.split()[0] for line in lines[1:]]
        assert f"{jid}.batch" in ids and f"{jid}.1" in ids and f"{jid}.0" not in ids
        row = next(line.split() for line in lines[1:] if line.split()[0] == f"{jid}.1")
        assert row[1] == "worker" and row[2] == "debug" and row[-1] == c.node
        p = c.run("squeue", f"--steps={jid}.1", "-h", "-o", "%i|%j|%A|%T")
        assert p.stdout == f"{jid}.1|worker|2|RUNNING\n", p.stdout
        p = c.run("squeue", f"-s{jid}.batch", "-h", "-o", "%i %j")
        assert p.stdout == f"{jid}.batch batch\n"
        p = c.run("squeue", "--steps=12.x")
        assert p.returncode == 1 and "Invalid job step id: 12.x" in p.stderr
        p = c.run("squeue", "-s", f"{jid}.1")  # an optional argument must be attached
        assert p.returncode == 1 and f"Unrecognized option: {jid}.1" in p.stderr
    finally:
        (tmp_path / "gate" / "stop").touch()
    assert done(c, jid)["state"] == "COMPLETED"
    assert c.run("squeue", "-s", "-h", "-j", jid).stdout == ""


def test_srun_and_salloc_outside_a_job(shim_cluster: ShimCluster, tmp_path: Path) -> None:
    c = shim_cluster
    p = c.run("srun", "-n", "2", "-l", "bash", "-c",
              "echo $SLURM_JOB_ID $SLURM_PROCID $SLURM_NTASKS", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    lines = sorted(p.stdout.splitlines())
    jid = lines[0].split()[1]
    assert lines == [f"0: {jid} 0 2", f"1: {jid} 1 2"]
    assert done(c, jid)["state"] == "COMPLETED"
    p = c.run("srun", "bash", "-c", "read x; echo got $x; exit 5", input="hello\n",
              cwd=tmp_path)
    assert (p.returncode, p.stdout) == (5, "got hello\n")
    p = c.run("salloc", "-n", "2", "bash", "-c",
              "echo $SLURM_NTASKS; srun -l hostname | sort", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "2"
    assert p.stderr.startswith("salloc: Granted job allocation ")
    assert "salloc: Relinquishing job allocation" in p.stderr


@pytest.mark.skipif(shutil.which("mpicc") is None, reason="Open MPI (mpicc) not installed")
def test_mpi_hello(shim_cluster: ShimCluster, tmp_path: Path) -> None:
    c = shim_cluster
    (tmp_path / "hello.c").write_text(
        '#include <mpi.h>\n#include <stdio.h>\nint main(int argc, char **argv) {\n'
        '  int rank, size; MPI_Init(&argc, &argv);\n'
        '  MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &size);\n'
        '  printf("hello from rank %d of %d\\n", rank, size); MPI_Finalize(); return 0; }\n')
    cc = c.run("mpicc", "-o", "hello", "hello.c", cwd=tmp_path)
    assert cc.returncode == 0, cc.stderr
    (tmp_path / "mpi.sh").write_text(
        "#!/bin/bash\n#SBATCH -n 2\n#SBATCH -o mpi.out\n"
        "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n"
        "mpirun --oversubscribe -np 2 ./hello\n"
        "srun --mpi=pmix ./hello\n")
    jid = submit(c, "mpi.sh", cwd=tmp_path)
    rec = done(c, jid)
    out = (tmp_path / "mpi.out").read_text()
    assert rec["state"] == "COMPLETED", out
    hellos = sorted(x for x in out.splitlines() if x.startswith("hello"))
    assert hellos == ["hello from rank 0 of 2"] * 2 + ["hello from rank 1 of 2"] * 2, out


def test_script_on_stdin_and_client_shapes(shim_cluster: ShimCluster, tmp_path: Path) -> None:
    c = shim_cluster
    script = "#!/bin/sh\n#SBATCH -J fromstdin\necho stdin-job\n"
    p = c.run("sbatch", "--parsable", cwd=tmp_path, input=script)  # batchspawner
    assert p.returncode == 0 and p.stdout.strip().isdigit(), p.stderr
    jid = p.stdout.strip()
    p = c.run("sbatch", "--parsable", "--job-name", "uuid-123", "/dev/stdin", cwd=tmp_path,
              input=script)  # snakemake's pass-command-as-script mode
    jid2 = p.stdout.strip()
    assert p.returncode == 0 and jid2.isdigit(), p.stderr
    for j in (jid, jid2):
        assert done(c, j)["state"] == "COMPLETED"
    assert (tmp_path / f"slurm-{jid}.out").read_text() == "stdin-job\n"
    # snakemake status query
    p = c.run("sacct", "-X", "--parsable2", "--clusters", "all", "--noheader",
              "--format=JobIdRaw,State", "--starttime", "now-1hours", "--endtime", "now",
              "--name", "uuid-123")
    assert p.stdout == f"{jid2}|COMPLETED\n", p.stderr
    # Parsl: probe, then status
    assert c.run("sacct", "-X").returncode == 0
    p = c.run("sacct", "-X", "--noheader", "--format=jobid,state%20", "--job", f"{jid},{jid2}")
    assert [ln.split() for ln in p.stdout.splitlines()] == [[jid, "COMPLETED"],
                                                             [jid2, "COMPLETED"]]
    # qsub from stdin (batchspawner's PBS spawner) prints <seq>.<server>
    p = c.run("qsub", cwd=tmp_path, input="#!/bin/sh\n#PBS -N pbsstdin\n#PBS -V\necho pbs\n")
    assert p.returncode == 0 and re.fullmatch(r"\d+\.\S+\n", p.stdout), p.stderr
    seq = p.stdout.split(".")[0]
    rec = done(c, seq)
    assert rec["state"] == "COMPLETED" and rec["dialect"] == "pbs"
    p = c.run("qstat", "-x", "-f", "-F", "json", p.stdout.strip())
    assert p.returncode == 0
    import json

    assert [v["job_state"] for v in json.loads(p.stdout)["Jobs"].values()] == ["F"]


def test_time_min_backfills_with_a_shorter_limit(shim_cluster: ShimCluster,
                                                 tmp_path: Path) -> None:
    """sbatch --time-min: a job that would delay the head job's reservation with its full
    limit starts at once with a limit cut to fit the hole (Slurm's TimeMin)."""
    c = shim_cluster
    busy = submit(c, "-c", "4", "-t", "3", "--wrap=sleep 300", cwd=tmp_path)
    c.wait_job(busy, lambda r: r["state"] == "RUNNING")
    head = submit(c, "-c", "8", "-t", "10", "--wrap=true", cwd=tmp_path)  # whole node
    plain = submit(c, "-c", "4", "-t", "60", "--wrap=sleep 300", cwd=tmp_path)
    short = submit(c, "-c", "4", "-t", "60", "--time-min", "1", "--wrap=sleep 300",
                   cwd=tmp_path)
    try:
        rec = c.wait_job(short, lambda r: r["state"] == "RUNNING")
        assert 60 <= rec["time_limit_s"] <= 240, rec["time_limit_s"]  # cut from 60 min
        assert c.client().job(plain)["state"] == "PENDING"  # 60 min would delay the head
        head_rec = c.client().job(head)
        assert head_rec["state"] == "PENDING" and head_rec["est_start"] is not None
        # the shortened job ends by the time the head job is reserved to start
        assert rec["start_time"] + rec["time_limit_s"] <= head_rec["est_start"] + 1
        p = c.run("scontrol", "show", "job", short)
        assert "TimeMin=00:01:00" in p.stdout, p.stdout
    finally:
        c.run("scancel", busy, head, plain, short)


def test_licenses_are_counted_and_shown(shim_cluster: ShimCluster, tmp_path: Path) -> None:
    c = shim_cluster
    p = c.run("scontrol", "show", "licenses")
    assert p.stdout == "LicenseName=matlab\n    Total=1 Used=0 Free=1 Reserved=0 Remote=no\n"
    first = submit(c, "-L", "matlab:1", "--wrap=sleep 60", cwd=tmp_path)
    second = submit(c, "-L", "matlab", "--wrap=true", cwd=tmp_path)
    try:
        c.wait_job(first, lambda r: r["state"] == "RUNNING")
        rec = c.wait_job(second, lambda r: r["reason"] == "Licenses")
        assert rec["state"] == "PENDING"
        p = c.run("scontrol", "-o", "show", "lic", "matlab")
        assert p.stdout == "LicenseName=matlab Total=1 Used=1 Free=0 Reserved=0 Remote=no\n"
        assert c.run("scontrol", "show", "lic", "nosuch").stdout == ""
        p = c.run("sbatch", "-L", "nosuch:1", "--wrap=true", cwd=tmp_path)
        assert p.returncode == 1 and "Batch job submission failed" in p.stderr, p.stderr
    finally:
        c.run("scancel", first)
    assert done(c, second)["state"] == "COMPLETED"


def test_srun_prolog_and_epilog(shim_cluster: ShimCluster, tmp_path: Path) -> None:
    c = shim_cluster
    pro = tmp_path / "pro.sh"
    pro.write_text('#!/bin/sh\necho "prolog args: $*" >> log\n[ ! -e stop ]\n')
    epi = tmp_path / "epi.sh"
    epi.write_text('#!/bin/sh\necho "epilog args: $* job=$SLURM_JOB_ID" >> log\nexit 7\n')
    pro.chmod(0o755)
    epi.chmod(0o755)
    p = c.run("srun", f"--prolog={pro}", f"--epilog={epi}", "bash", "-c", "echo step >> log",
              cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "srun: error: srun epilog failed status=7" in p.stderr
    lines = (tmp_path / "log").read_text().splitlines()
    assert lines[:2] == ["prolog args: bash -c echo step >> log", "step"], lines
    assert lines[2].startswith("epilog args: bash -c echo step >> log job=") and \
        lines[2] != "epilog args: bash -c echo step >> log job=", lines
    (tmp_path / "stop").touch()
    p = c.run("srun", f"--prolog={pro}", "bash", "-c", "echo never >> log", cwd=tmp_path)
    assert p.returncode == 1
    assert "srun: error: srun prolog failed rc = 1. Aborting step." in p.stderr
    assert "never" not in (tmp_path / "log").read_text().splitlines()


def test_srun_prolog_inside_a_batch_job(shim_cluster: ShimCluster, tmp_path: Path) -> None:
    c = shim_cluster
    pro = tmp_path / "pro.sh"
    pro.write_text('#!/bin/sh\necho "prolog $(id -u) $*" >> log\n')
    pro.chmod(0o755)
    (tmp_path / "job.sh").write_text(
        f"#!/bin/sh\n#SBATCH -o main.out\nsrun --prolog={pro} sh -c 'echo step >> log'\n")
    jid = submit(c, "job.sh", cwd=tmp_path)
    assert done(c, jid)["state"] == "COMPLETED"
    assert (tmp_path / "log").read_text().splitlines() == [
        f"prolog {os.getuid()} sh -c echo step >> log", "step"]
