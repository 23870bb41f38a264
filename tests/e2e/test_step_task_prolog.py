"""srun's ``--task-prolog``/``--task-epilog`` and ``--prolog``/``--epilog`` on two nodes
(two real agents on this machine, ``ma`` and ``mb``): a batch script's srun runs the
programs around each task on each node, with Slurm's export/unset/print lines; the
cluster's ``[scripts] task_prolog``/``task_epilog`` run around every step task too (first
and last, as Slurm's TaskProlog/TaskEpilog)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import test_multinode_steps as mn
from tests.e2e.cluster import wait_for

TASK_PROLOG = """#!/bin/sh
echo "export FROM_TP=p$SLURM_PROCID"
echo "unset DROP_ME"
echo "print hi from $SLURMD_NODENAME"
echo "ignored line"
"""
TASK_EPILOG = """#!/bin/sh
echo "$SLURMD_NODENAME $(id -u) $SLURM_STEP_ID" > "{work}/te.$SLURM_JOB_ID.$SLURM_PROCID"
"""
CLUSTER_TP = """#!/bin/sh
echo "export FROM_CLUSTER=c$SLURM_PROCID"
echo "export FROM_TP=overridden-by-srun-s"
"""
CLUSTER_TE = """#!/bin/sh
echo "$SLURMD_NODENAME" > "{work}/ce.$SLURM_JOB_ID.${{SLURM_STEP_ID:-batch}}.$SLURM_PROCID"
"""
SRUN_PROLOG = """#!/bin/sh
echo "$@" > "{work}/srun-prolog.$SLURM_JOB_ID"
"""


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[mn.TwoNodes]:
    root = tmp_path_factory.mktemp("taskprolog")
    os.chmod(root, 0o755)
    cl = mn.TwoNodes(root)
    ctp = _prog(cl.work / "cluster-tp.sh", CLUSTER_TP, cl.work)
    cte = _prog(cl.work / "cluster-te.sh", CLUSTER_TE, cl.work)
    (root / "corral.toml").write_text(
        mn.CONFIG + f'\n[scripts]\ntask_prolog = "{ctp}"\ntask_epilog = "{cte}"\n')
    try:
        cl.up()
        yield cl
    finally:
        cl.down()


def _prog(path: Path, text: str, work: Path) -> str:
    path.write_text(text.format(work=work))
    path.chmod(0o755)
    return str(path)


def test_task_prolog_and_epilog_around_each_task_on_each_node(two: mn.TwoNodes) -> None:
    work = two.work
    _prog(work / "tp.sh", TASK_PROLOG, work)  # given relative: srun's directory
    te = _prog(work / "te.sh", TASK_EPILOG, work)
    sp = _prog(work / "sp.sh", SRUN_PROLOG, work)
    bad = _prog(work / "bad.sh", "#!/bin/sh\nexit 3\n", work)
    script = ("#!/bin/bash\nexport DROP_ME=x\n"
              f"srun -N2 -n3 -l --task-prolog=tp.sh --task-epilog={te} bash -c "
              "'echo task $SLURMD_NODENAME $FROM_TP ${DROP_ME:-gone} $FROM_CLUSTER'\n"
              "echo rc=$?\n"
              "srun -N2 -n2 bash -c 'echo plain $SLURMD_NODENAME $FROM_CLUSTER'\n"
              f"srun -n1 --task-prolog={bad} echo never ran\n"
              "echo bad=$?\n"
              f"srun -n1 --prolog={sp} --epilog=/bin/false true 2>&1\n"
              "echo pe=$?\n")
    jid = two.sbatch(script, "-N2", "-n3", "-o", str(work / "tp-%j.out"))
    job = two.wait_done(jid)
    out = (work / f"tp-{jid}.out").read_text()
    assert job["state"] == "COMPLETED", (job, out, two.logs())
    lines = out.splitlines()
    tasks = sorted(ln for ln in lines if ln[:1].isdigit())
    assert tasks == ["0: hi from ma", "0: task ma p0 gone c0", "1: hi from ma",
                     "1: task ma p1 gone c1", "2: hi from mb", "2: task mb p2 gone c2"], out
    # a step without srun's options: the cluster's task prolog still runs (on the agents)
    assert sorted(ln for ln in lines if ln.startswith("plain ")) == ["plain ma c0",
                                                                     "plain mb c1"], out
    assert "rc=0" in lines and "ignored line" not in out
    # the epilog ran after each task on its node, as the job's user
    uid = str(job.get("uid", os.getuid()))
    for t, node in ((0, "ma"), (1, "ma"), (2, "mb")):
        got = wait_for(lambda t=t: (work / f"te.{jid}.{t}").exists(), 10, what="epilog")
        assert got and (work / f"te.{jid}.{t}").read_text().split() == [node, uid, "0"]
    # the cluster's task epilog: after each task of each step, and after the batch script
    for name, node in (("0.0", "ma"), ("0.2", "mb"), ("1.1", "mb"), ("batch.0", "ma")):
        wait_for(lambda name=name: (work / f"ce.{jid}.{name}").exists(), 10,
                 what=f"cluster task epilog {name}")
        assert (work / f"ce.{jid}.{name}").read_text().strip() == node
    # a failing task prolog ends the task with its status; the command never runs
    assert "slurmstepd: error: TaskProlog failed status=exit 3" in out, out
    assert "never ran" not in out and "bad=3" in lines, out
    # srun's own --prolog/--epilog: on srun's host, with the step's command as arguments
    assert (work / f"srun-prolog.{jid}").read_text() == "true\n"
    assert "srun: error: srun epilog failed status=1" in out and "pe=0" in lines, out
