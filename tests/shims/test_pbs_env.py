"""PBS job variables derived from a job's Slurm variables."""

from __future__ import annotations

from corral.shims.pbs_env import nodefile_text, pbs_variables, tasks_per_node


def test_plain_and_array_jobs() -> None:
    env = {"SLURM_JOB_ID": "12", "SLURM_JOB_NAME": "x", "SLURM_JOB_PARTITION": "batch",
           "SLURM_CPUS_ON_NODE": "4", "SLURM_JOB_NUM_NODES": "1", "HOME": "/home/a"}
    v = pbs_variables(env, server="srv", nodefile="/spool/12/nodefile")
    assert v["PBS_JOBID"] == "12.srv" and v["PBS_QUEUE"] == "batch" and v["NCPUS"] == "4"
    assert v["PBS_NODEFILE"] == "/spool/12/nodefile" and "PBS_ARRAY_INDEX" not in v
    env.update(SLURM_ARRAY_JOB_ID="10", SLURM_ARRAY_TASK_ID="2")
    v = pbs_variables(env, server="srv")
    assert (v["PBS_JOBID"], v["PBS_ARRAY_INDEX"], v["PBS_ARRAY_ID"]) == (
        "10[2].srv", "2", "10[].srv")


def test_nodefile() -> None:
    assert tasks_per_node("2(x3),1", 4) == [2, 2, 2, 1]
    env = {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)"}
    assert nodefile_text(env) == "n1\nn1\nn2\nn2\n"
