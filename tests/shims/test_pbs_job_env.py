"""The PBS job environment of qsub jobs on a real cluster: PBS_* variables, the node file
(written by the agent, removed at the end), arrays, the start directory."""

from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path

from tests.shims.harness import ShimCluster

PRINT = ("for v in PBS_JOBID PBS_JOBNAME PBS_O_WORKDIR PBS_O_HOST PBS_O_HOME PBS_QUEUE "
         "PBS_ENVIRONMENT PBS_TASKNUM PBS_NODENUM PBS_ARRAY_INDEX PBS_ARRAY_ID NCPUS; do "
         "eval echo $v=\\${$v-unset}; done\n"
         "echo PWD=$PWD\necho NODEFILE=$PBS_NODEFILE\necho NODES=$(cat $PBS_NODEFILE | "
         "tr '\\n' ,)\n")


def _qsub(c: ShimCluster, *args: str, cwd: Path, script: str) -> str:
    (cwd / "job.pbs").write_text(script)
    p = c.run("qsub", *args, "job.pbs", cwd=cwd)
    assert p.returncode == 0, p.stderr
    assert re.fullmatch(r"\d+(\[\])?\.\S+\n", p.stdout), p.stdout
    return p.stdout.strip()


def _vars(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _wait_gone(path: str, timeout_s: float = 20.0) -> None:
    end = time.monotonic() + timeout_s
    while os.path.exists(path):
        assert time.monotonic() < end, f"{path} was not removed after the job ended"
        time.sleep(0.05)


def test_qsub_job_sees_pbs_variables_and_node_file(shim_cluster: ShimCluster,
                                                   tmp_path: Path) -> None:
    c = shim_cluster
    home = tmp_path / "home"
    home.mkdir()
    env = dict(c.env, HOME=str(home))
    (tmp_path / "job.pbs").write_text(
        "#!/bin/bash\n#PBS -N pbsvars\n#PBS -l nodes=1:ppn=3\n#PBS -q batch\n"
        "#PBS -o vars.out\n#PBS -j oe\n" + PRINT)
    p = c.run("qsub", "job.pbs", cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    pbs_id = p.stdout.strip()
    seq, server = pbs_id.split(".", 1)
    rec = c.wait_job(seq, lambda r: r["state"] not in ("PENDING", "RUNNING", "COMPLETING"))
    assert rec["state"] == "COMPLETED", rec
    got = _vars((tmp_path / "vars.out").read_text())
    assert got["PBS_JOBID"] == pbs_id and got["PBS_JOBNAME"] == "pbsvars"
    assert got["PBS_O_WORKDIR"] == str(tmp_path) and got["PBS_O_HOST"] == server
    assert got["PBS_O_HOME"] == str(home)
    assert (got["PBS_QUEUE"], got["PBS_ENVIRONMENT"]) == ("batch", "PBS_BATCH")
    assert (got["PBS_TASKNUM"], got["PBS_NODENUM"]) == ("1", "0")
    assert got["PBS_ARRAY_INDEX"] == "unset" and got["NCPUS"] == "3"
    assert got["PWD"] == str(home)  # PBS starts the job in $HOME
    # Parsl/Nextflow: `cat $PBS_NODEFILE`, the host once per task slot (ppn)
    assert got["NODES"] == f"{c.node}," * 3
    nodefile = got["NODEFILE"]
    assert nodefile.endswith(f"/aux/{pbs_id}")
    _wait_gone(nodefile)  # removed once the job's end was acknowledged


def test_qsub_array_and_plain_sbatch_jobs(shim_cluster: ShimCluster, tmp_path: Path) -> None:
    c = shim_cluster
    pbs_id = _qsub(c, "-J", "1-2", "-N", "arr", "-j", "oe", cwd=tmp_path,
                   script="#!/bin/sh\n#PBS -l select=1:ncpus=2\n" + PRINT)
    seq, server = pbs_id.split("[]", 1)[0], pbs_id.split(".", 1)[1]
    with c.client() as cl:
        tasks = [j for j in cl.jobs(ids=[seq], include_finished=True)]
    assert len(tasks) == 2
    for t in tasks:
        rec = c.wait_job(t["id"], lambda r: r["state"] not in ("PENDING", "RUNNING"))
        assert rec["state"] == "COMPLETED", rec
    outs = sorted(tmp_path.glob("arr.o*"))
    assert len(outs) == 2, outs
    seen = {}
    for f in outs:
        got = _vars(f.read_text())
        seen[got["PBS_ARRAY_INDEX"]] = got
    assert sorted(seen) == ["1", "2"]
    for idx, got in seen.items():
        assert got["PBS_JOBID"] == f"{seq}[{idx}].{server}"
        assert got["PBS_ARRAY_ID"] == f"{seq}[].{server}"
        assert got["NODES"] == f"{c.node},"  # select=1:ncpus=2: one MPI slot (mpiprocs=1)
        assert got["NCPUS"] == "2"
    # a Slurm job gets none of this
    p = c.run("sbatch", "--wrap", "echo ${PBS_JOBID-none} ${PBS_NODEFILE-none}",
              cwd=tmp_path)
    jid = p.stdout.split()[-1]
    c.wait_job(jid, lambda r: r["state"] == "COMPLETED")
    assert (tmp_path / f"slurm-{jid}.out").read_text() == "none none\n"


def test_node_file_is_readable_not_listable(shim_cluster: ShimCluster) -> None:
    aux = shim_cluster.state_dir / "agent" / "aux"
    assert stat.S_IMODE(aux.stat().st_mode) == 0o711


def test_output_to_an_existing_directory(shim_cluster: ShimCluster, tmp_path: Path) -> None:
    """``-o logs`` names a directory that exists: output lands in ``logs/<seq>.OU`` (PBS),
    not in a file called ``logs``; ``-e`` naming a file still is that file."""
    c = shim_cluster
    (tmp_path / "logs").mkdir()
    pbs_id = _qsub(c, "-o", "logs", "-e", "err.txt", cwd=tmp_path,
                   script="#!/bin/sh\necho to-out\necho to-err >&2\n")
    seq = pbs_id.split(".")[0]
    c.wait_job(seq, lambda r: r["state"] == "COMPLETED")
    assert (tmp_path / "logs" / f"{seq}.OU").read_text() == "to-out\n"
    assert (tmp_path / "err.txt").read_text() == "to-err\n"
