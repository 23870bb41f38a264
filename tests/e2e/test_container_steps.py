"""srun steps in a container on two nodes (two agents on this machine, ``ma`` and ``mb``,
each with its own image cache): every task on every node runs in the image; the tasks of
one node share the step's container (its /tmp)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.apptainer import build_sif, build_sif_from, find_apptainer
from tests.e2e import test_multinode_steps as mn
from tests.registry import Registry, require_containers, running_registry

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    require_containers()
    with running_registry() as reg:
        reg.push_busybox("steps/bb:1", os_name="Corral Step Image")
        yield reg


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory,
        registry: Registry) -> Iterator[mn.TwoNodes]:
    root = tmp_path_factory.mktemp("ctrsteps")
    os.chmod(root, 0o755)
    cl = mn.TwoNodes(root)
    program, _why = find_apptainer()
    (root / "corral.toml").write_text(
        mn.CONFIG + f'\n[containers]\ninsecure_registries = ["{registry.host}"]\n'
        + (f'apptainer = "{program}"\n' if program else ""))
    try:
        cl.up()
        yield cl
    finally:
        cl.down()


def test_two_node_srun_in_a_container(two: mn.TwoNodes, registry: Registry) -> None:
    ref = registry.ref("steps/bb:1")
    script = ("#!/bin/bash\n"
              f"srun -N2 -n4 --container-image={ref} sh -c '. /etc/os-release; "
              "echo task $SLURM_PROCID $SLURMD_NODENAME \"$NAME\"; "
              "echo $SLURM_PROCID > /tmp/shared.$SLURM_PROCID; sleep 0.5; "
              "echo tmp $SLURMD_NODENAME $(ls /tmp | grep shared)'\n"
              "echo host $(. /etc/os-release; echo $NAME)\n")
    jid = two.sbatch(script, "-N2", "-n4", "-o", str(two.work / "ctr-%j.out"))
    job = two.wait_done(jid, 90)
    out = (two.work / f"ctr-{jid}.out").read_text()
    assert job["state"] == "COMPLETED", (job, out, two.logs())
    tasks = sorted(line for line in out.splitlines() if line.startswith("task "))
    assert tasks == ["task 0 ma Corral Step Image", "task 1 ma Corral Step Image",
                     "task 2 mb Corral Step Image", "task 3 mb Corral Step Image"], out
    tmps = sorted(line for line in out.splitlines() if line.startswith("tmp "))
    assert tmps == ["tmp ma shared.0 shared.1"] * 2 + ["tmp mb shared.2 shared.3"] * 2, out
    host = [line for line in out.splitlines() if line.startswith("host ")]
    assert host and "Corral Step Image" not in host[0]  # the batch script ran on the host
    for node in ("ma", "mb"):  # each node pulled into its own cache
        assert list(Path(two.root / f"agent-{node}" / "images" / "images").iterdir())


def test_step_with_a_missing_image_fails_its_tasks(two: mn.TwoNodes,
                                                   registry: Registry) -> None:
    ref = registry.ref("steps/none:1")
    jid = two.sbatch(f"#!/bin/bash\nsrun -N2 -n2 --container-image={ref} true\n"
                     "echo rc=$?\n", "-N2", "-n2", "-o", str(two.work / "miss-%j.out"))
    two.wait_done(jid, 90)
    out = (two.work / f"miss-{jid}.out").read_text()
    assert "image pull failed" in out and "manifest unknown" in out, out
    assert "rc=0" not in out, out


def test_named_container_keeps_its_changes_for_later_steps(two: mn.TwoNodes,
                                                           registry: Registry) -> None:
    ref = registry.ref("steps/bb:1")
    script = ("#!/bin/bash\n"
              f"srun -N2 -n2 --container-image={ref} --container-name=c1 --container-writable "
              "sh -c 'echo kept-$SLURMD_NODENAME > /etc/marker'\n"
              "srun -N2 -n2 --container-name=c1 sh -c 'echo named $(cat /etc/marker)'\n"
              f"srun -N1 -n1 --container-image={ref} sh -c 'cat /etc/marker || echo fresh'\n"
              "srun -N1 -n1 --container-name=other true; echo unknown=$?\n")
    jid = two.sbatch(script, "-N2", "-n2", "-o", str(two.work / "named-%j.out"))
    job = two.wait_done(jid, 90)
    out = (two.work / f"named-{jid}.out").read_text()
    assert job["state"] == "COMPLETED", (job, out)
    named = sorted(line for line in out.splitlines() if line.startswith("named "))
    assert named == ["named kept-ma", "named kept-mb"], out
    assert "fresh" in out and "unknown=1" in out, out
    assert "no container named 'other'" in out, out


def test_two_node_srun_in_a_sif(two: mn.TwoNodes, registry: Registry) -> None:
    """A .sif in srun steps: each node unpacks it once (Apptainer) into its own cache and
    runs the tasks on that tree as ``apptainer exec`` would: the SIF's %environment is
    applied (PATH too), APPTAINERENV_ and --container-env win over it, the host's PATH
    and LD_LIBRARY_PATH stay out; --container-entrypoint runs its %runscript; a named
    container of the SIF keeps its changes for the next step."""
    program, why = find_apptainer()
    if not program:
        pytest.skip(why)
    base = build_sif(program, registry.ref("steps/bb:1"), two.work / "steps-base.sif")
    sif = build_sif_from(program, base, two.work / "steps.sif",
                         "%environment\n    export FROM_SIF=sif-env\n"
                         "    export PATH=/opt/sif/bin:$PATH\n    export KEEP_ME=image\n"
                         "    export FORCED=image\n"
                         "%runscript\n    echo runscript \"$@\"\n")
    probe = ("echo task $SLURM_PROCID $SLURMD_NODENAME \"$NAME\" $(id -u) "
             "$FROM_SIF $KEEP_ME $FORCED ${LD_LIBRARY_PATH} $APPTAINER_NAME; "
             "echo path $PATH")
    script = ("#!/bin/bash\n"
              "export KEEP_ME=job FORCED=no APPTAINERENV_FORCED=forced "
              "LD_LIBRARY_PATH=/host/lib\n"
              f"srun -N2 -n2 --container-image={sif} --container-env=KEEP_ME sh -c "
              f"'. /etc/os-release; {probe}'\n"
              f"srun -N1 -n1 --container-image={sif} --container-entrypoint one two\n"
              f"srun -N2 -n2 --container-image={sif} --container-name=s1 "
              "--container-writable sh -c 'echo kept-$SLURMD_NODENAME > /etc/marker'\n"
              "srun -N2 -n2 --container-name=s1 sh -c 'echo named $(cat /etc/marker) "
              "$FROM_SIF'\n")
    jid = two.sbatch(script, "-N2", "-n2", "-o", str(two.work / "sif-%j.out"))
    job = two.wait_done(jid, 90)
    out = (two.work / f"sif-{jid}.out").read_text()
    assert job["state"] == "COMPLETED", (job, out, two.logs())
    tasks = sorted(line for line in out.splitlines() if line.startswith("task "))
    me = os.geteuid()  # sbatch runs as the test's user
    tail = "sif-env job forced /.singularity.d/libs steps.sif"
    assert tasks == [f"task 0 ma Corral Step Image {me} {tail}",
                     f"task 1 mb Corral Step Image {me} {tail}"], out
    paths = [line for line in out.splitlines() if line.startswith("path ")]
    assert paths == ["path /opt/sif/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                     "/sbin:/bin"] * 2, out
    assert "runscript one two" in out.splitlines(), out
    # a named container of a SIF keeps its changes for the job's later steps
    named = sorted(line for line in out.splitlines() if line.startswith("named "))
    assert named == ["named kept-ma sif-env", "named kept-mb sif-env"], out


def test_task_prolog_of_a_container_step_is_the_hosts(two: mn.TwoNodes,
                                                      registry: Registry) -> None:
    """srun --task-prolog in a container step: the program is the host's (it runs before
    the task enters the image), its export/print lines reach the task in the image."""
    (two.root / "progs").mkdir(exist_ok=True)
    tp = two.root / "progs" / "ctr-tp.sh"  # outside the job's directory: not in the image
    tp.write_text("#!/bin/sh\necho \"export FROM_HOST_TP=h$SLURM_PROCID\"\n"
                  "echo \"print prolog on $SLURMD_NODENAME\"\n")
    tp.chmod(0o755)
    ref = registry.ref("steps/bb:1")
    script = ("#!/bin/bash\n"
              f"srun -N2 -n2 -l --task-prolog={tp} --container-image={ref} sh -c "
              "'. /etc/os-release; echo task $FROM_HOST_TP \"$NAME\"'\n")
    jid = two.sbatch(script, "-N2", "-n2", "-o", str(two.work / "ctp-%j.out"))
    job = two.wait_done(jid, 90)
    out = (two.work / f"ctp-{jid}.out").read_text()
    assert job["state"] == "COMPLETED", (job, out, two.logs())
    assert sorted(out.splitlines()) == ["0: prolog on ma", "0: task h0 Corral Step Image",
                                        "1: prolog on mb", "1: task h1 Corral Step Image"], out
