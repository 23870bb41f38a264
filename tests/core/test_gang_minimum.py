"""A task group's own minimum counts when the job gives none (issue 14): the job starts
with the group's minimum, and a group larger than the partition is accepted when its
minimum fits."""

from __future__ import annotations

from builders import cluster, config, job

from corral.core import run_cycle
from corral.core.feasibility import validate
from corral.core.model.job import TaskGroup


def _two_cpus() -> object:
    return cluster(nodes=1, sockets=1, cores_per_socket=2, mem_mb=4000)


def test_group_minimum_starts_the_job_on_what_is_free() -> None:
    c = _two_cpus()
    busy = job(1).walltime_s(100).running_on(("n001", 1), start=0.0).build()
    gang = job(2).group("w", replicas=2, cpus=1, min_available=1).walltime_s(60).submit(1)
    r = run_cycle(c.snapshot(pending=[gang.build()], running=[busy]), config(), 10.0)
    assert [s.job_id for s in r.starts] == [2]
    assert r.starts[0].allocation.tasks == 1


def test_group_without_minimum_still_waits_whole() -> None:
    c = _two_cpus()
    busy = job(1).walltime_s(100).running_on(("n001", 1), start=0.0).build()
    gang = job(2).group("w", replicas=2, cpus=1).walltime_s(60).submit(1).build()
    r = run_cycle(c.snapshot(pending=[gang], running=[busy]), config(), 10.0)
    assert not r.starts and r.pending[2].reason == "Resources"
    assert "it needs 2 CPUs" in r.pending[2].detail


def test_a_group_with_gres_takes_them_per_task_one_task_a_node() -> None:
    from builders import Cluster, node_spec

    from corral.core.model.node import Node, NodeState

    c = Cluster([Node(node_spec(f"n{i}", 1, 4, 4000, gres=(("fpga", 1),)), NodeState.IDLE)
                 for i in (1, 2)], [])
    c.partition("batch", is_default=True)

    two = job(1).walltime_s(60).spec(task_groups=(
        TaskGroup("w", 2, 1, gres=(("fpga", 1),)),)).build()
    r = run_cycle(c.snapshot(pending=[two]), config(), 10.0)
    nodes = r.starts[0].allocation.nodes
    assert sorted((n.node, n.tasks, n.gres) for n in nodes) == [
        ("n1", 1, (("fpga", 1),)), ("n2", 1, (("fpga", 1),))]
    three = job(2).walltime_s(60).spec(task_groups=(
        TaskGroup("w", 3, 1, gres=(("fpga", 1),)),)).build()
    assert validate(three.spec, c.snapshot(pending=[three]), config()) is not None


def test_group_larger_than_the_partition_is_accepted_when_its_minimum_fits() -> None:
    c = _two_cpus()
    ok = job(3).group("w", replicas=4, cpus=1, min_available=1).walltime_s(60).build()
    snap = c.snapshot(pending=[ok])
    assert validate(ok.spec, snap, config()) is None
    r = run_cycle(snap, config(), 10.0)
    assert [s.allocation.tasks for s in r.starts] == [2]
    too_big = job(4).group("w", replicas=4, cpus=1, min_available=3).walltime_s(60).build()
    rej = validate(too_big.spec, c.snapshot(pending=[too_big]), config())
    assert rej is not None and "task group 'w'" in rej.message
