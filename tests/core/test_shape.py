"""Shape normalization: Slurm's node/task/memory/GPU conventions."""

from __future__ import annotations

import pytest

from corral.core.config import SchedulerConfig
from corral.core.model.job import JobSpec, TaskGroup
from corral.core.model.partition import Partition
from corral.core.shape import ShapeError, build_shape, shape_of, time_limit_s

CFG = SchedulerConfig()
PART = Partition("p", ())


def one(spec: JobSpec, part: Partition = PART, cfg: SchedulerConfig = CFG):  # type: ignore[no-untyped-def]
    s = build_shape(spec, part, cfg)
    assert len(s.sets) == 1
    return s, s.sets[0]


def test_nodes_max_none_is_exactly_nodes_min() -> None:
    s, ts = one(JobSpec(nodes_min=3))
    assert (ts.nodes_min, ts.nodes_max, ts.fixed, ts.hi, ts.tasks) == (3, 3, True, 1, 3)


def test_ntasks_spread_over_a_node_range() -> None:
    s, ts = one(JobSpec(ntasks=10, nodes_max=10))
    assert not ts.fixed and ts.tasks == 10 and ts.nodes_max == 10 and ts.hi == 0
    # more nodes than tasks shrinks to the task count, as Slurm does
    _, ts = one(JobSpec(ntasks=2, nodes_min=4, nodes_max=4))
    assert (ts.nodes_min, ts.nodes_max) == (2, 2)


def test_ntasks_matching_tasks_per_node_is_uniform() -> None:
    _, ts = one(JobSpec(ntasks=8, nodes_min=2, nodes_max=2, ntasks_per_node=4))
    assert ts.fixed and ts.uniform and ts.hi == 4


def test_tasks_that_cannot_fit_the_per_node_bound() -> None:
    with pytest.raises(ShapeError, match="do not fit"):
        build_shape(JobSpec(ntasks=9, nodes_min=2, nodes_max=2, ntasks_per_node=4), PART, CFG)


def test_memory_conventions() -> None:
    _, ts = one(JobSpec(mem_per_node_mb=0))
    assert ts.mem_per_node_mb == 0 and ts.mem_per_task_mb is None  # 0 = whole node
    _, ts = one(JobSpec(mem_per_cpu_mb=100, cpus_per_task=4))
    assert ts.mem_per_task_mb == 400
    _, ts = one(JobSpec(cpus_per_task=2), Partition("p", (), default_mem_per_cpu_mb=50))
    assert ts.mem_per_task_mb == 100
    _, ts = one(JobSpec(cpus_per_task=2), PART, SchedulerConfig(default_mem_per_cpu_mb=7))
    assert ts.mem_per_task_mb == 14
    _, ts = one(JobSpec())
    assert ts.mem_per_task_mb is None  # the node's proportional share, per node class
    with pytest.raises(ShapeError, match="not both"):
        build_shape(JobSpec(mem_per_node_mb=1, mem_per_cpu_mb=1), PART, CFG)


def test_gpus_per_job() -> None:
    _, ts = one(JobSpec(gpus=4))
    assert ts.gpus_per_node == 4 and ts.gpus_total == 0
    _, ts = one(JobSpec(gpus=4, nodes_min=2))
    assert ts.gpus_per_node == 2
    _, ts = one(JobSpec(gpus=3, nodes_min=2))
    assert ts.gpus_total == 3 and ts.gpus_per_node == 0


def test_exclusive_partition() -> None:
    s, _ = one(JobSpec(), Partition("p", (), exclusive=True))
    assert s.exclusive


def test_task_groups() -> None:
    spec = JobSpec(task_groups=(TaskGroup("a", 4, 2), TaskGroup("b", 2, 1, gpus_per_task=1)))
    s = build_shape(spec, PART, CFG)
    assert s.grouped and [t.tasks for t in s.sets] == [4, 2] and s.min_available == 6
    spec = JobSpec(task_groups=(TaskGroup("a", 4), TaskGroup("b", 2)), min_available=3)
    s = build_shape(spec, PART, CFG)
    assert s.min_available == 3 and [t.min_tasks for t in s.sets] == [0, 0]
    with pytest.raises(ShapeError, match="twice"):
        build_shape(JobSpec(task_groups=(TaskGroup("a"), TaskGroup("a"))), PART, CFG)
    with pytest.raises(ShapeError, match="outside"):
        build_shape(JobSpec(task_groups=(TaskGroup("a", 2),), min_available=3), PART, CFG)


@pytest.mark.parametrize("spec", [JobSpec(nodes_min=0), JobSpec(nodes_min=3, nodes_max=2),
                                  JobSpec(cpus_per_task=0), JobSpec(ntasks=0),
                                  JobSpec(gpus=-1), JobSpec(ntasks_per_node=0)])
def test_bad_requests(spec: JobSpec) -> None:
    with pytest.raises(ShapeError):
        build_shape(spec, PART, CFG)


def test_shape_memo_is_per_spec_partition_and_config() -> None:
    spec = JobSpec(cpus_per_task=2)
    a = shape_of(spec, PART, CFG)
    assert shape_of(spec, PART, CFG) is a
    p2 = Partition("p", (), default_mem_per_cpu_mb=5)
    assert shape_of(spec, p2, CFG).single.mem_per_task_mb == 10
    other = SchedulerConfig(default_mem_per_cpu_mb=3)
    assert shape_of(spec, PART, other).single.mem_per_task_mb == 6
    with pytest.raises(ShapeError):
        shape_of(JobSpec(nodes_min=0), PART, CFG)


def test_time_limit_resolution() -> None:
    from corral.core.model.job import Job

    p = Partition("p", (), default_time_s=60, max_time_s=600)
    assert time_limit_s(Job(1, JobSpec(), 0.0), p, CFG) == 60
    assert time_limit_s(Job(1, JobSpec(), 0.0), Partition("p", (), max_time_s=600), CFG) == 600
    assert time_limit_s(Job(1, JobSpec(), 0.0), PART, CFG) == CFG.default_time_s
    assert time_limit_s(Job(1, JobSpec(time_limit_s=5), 0.0, time_limit_s=9), p, CFG) == 9
