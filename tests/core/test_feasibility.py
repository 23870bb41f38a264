"""Can-never-run verdicts: ``validate`` at submit and ``Reject`` from the cycle."""

from __future__ import annotations

import pytest
from builders import cluster, job

from corral.core import run_cycle
from corral.core.config import SchedulerConfig
from corral.core.feasibility import validate
from corral.core.model.partition import PartitionState, QosLimits
from corral.core.model.resources import Resources


def gpu_cluster():  # type: ignore[no-untyped-def]
    c = cluster(nodes=4, sockets=2, cores_per_socket=8, mem_mb=64000, gpus_per_node=4,
                gpu_nodes=2, features=("avx512", "ib"), max_time_s=86400)
    return c


@pytest.mark.parametrize(
    ("builder", "reason", "words"),
    [
        (job().gpus(8), "NodeConfigUnavailable", "8 GPUs per node"),
        (job().gpus(2, "h100"), "NodeConfigUnavailable", "h100"),
        (job().walltime_s(2 * 86400), "PartitionTimeLimit", "exceeds partition batch"),
        (job().partition("nope"), "InvalidPartition", "'nope' does not exist"),
        (job().nodes(5), "PartitionNodeLimit", "has 4"),
        (job().cpus(17), "NodeConfigUnavailable", "17 CPUs per node"),
        (job().mem(128000), "NodeConfigUnavailable", "128000 MB"),
        (job().constraint("aarch64"), "BadConstraints", "no node"),
        (job().constraint("avx512&|"), "BadConstraints", "invalid constraint"),
        (job().nodelist("zz9"), "ReqNodeNotAvail", "'zz9' does not exist"),
        (job().mem(100).mem_per_cpu(10), "BadMemory", "not both"),
        (job().nodes(3).gpus(1), "NodeConfigUnavailable", "cannot provide"),
        (job().licenses(matlab=1), "BadLicenses", "does not exist"),
        (job().group("a", 2, gpus=5), "NodeConfigUnavailable", "task group 'a'"),
    ],
)
def test_never_runs(builder, reason, words) -> None:  # type: ignore[no-untyped-def]
    c = gpu_cluster()
    j = builder.build()
    snap = c.snapshot()
    rej = validate(j.spec, snap, SchedulerConfig(), job_id=j.id)
    assert rej is not None, "expected a rejection"
    assert rej.reason == reason and words in rej.message, rej
    # the cycle rejects it too when found in the queue
    r = run_cycle(c.snapshot(pending=[j]), SchedulerConfig(), 0.0)
    assert [(x.job_id, x.reason) for x in r.rejects] == [(j.id, reason)]
    assert j.id not in r.pending


@pytest.mark.parametrize(
    "builder",
    [job().gpus(4).nodes(2), job().nodes(4).tasks_per_node(16), job().mem(64000),
     job().constraint("avx512&ib"), job().tasks(40).nodes(1, 40), job().gpus_total(8).nodes(2),
     job().gpus_total(6).tasks(6).nodes(1, 6),
     job().group("cfd", 4, cpus=4).group("train", 4, gpus=1)],
)
def test_feasible_requests_are_accepted(builder) -> None:  # type: ignore[no-untyped-def]
    c = gpu_cluster()
    assert validate(builder.build().spec, c.snapshot(), SchedulerConfig()) is None


def test_down_nodes_mean_wait_not_reject() -> None:
    c = gpu_cluster()
    for n in ("n001", "n002"):
        c.set_state(n, __import__("corral.core.model.node", fromlist=["NodeState"]).NodeState.DOWN)
    j = job().gpus(2).build()
    assert validate(j.spec, c.snapshot(), SchedulerConfig()) is None
    r = run_cycle(c.snapshot(pending=[j]), SchedulerConfig(), 0.0)
    assert not r.rejects and not r.starts
    assert r.pending[j.id].reason == "Resources"


def test_submit_only_rules() -> None:
    c = gpu_cluster()
    c.partition("batch", state=PartitionState.DRAIN, is_default=True)
    j = job().build()
    rej = validate(j.spec, c.snapshot(), SchedulerConfig())
    assert rej is not None and "DRAIN" in rej.message
    # queued jobs in a draining partition still run
    r = run_cycle(c.snapshot(pending=[j]), SchedulerConfig(), 0.0)
    assert [s.job_id for s in r.starts] == [j.id]


def test_qos_per_job_limits_deny_at_submit_and_hold_in_queue() -> None:
    c = gpu_cluster()
    c.add_qos("normal", limits=QosLimits(max_wall_s=3600,
                                          max_tres_per_job=Resources.of(cpus=8)))
    j = job().walltime_s(7200).build()
    rej = validate(j.spec, c.snapshot(), SchedulerConfig())
    assert rej is not None and rej.reason == "QOSMaxWallDurationPerJobLimit"
    r = run_cycle(c.snapshot(pending=[j]), SchedulerConfig(), 0.0)
    assert r.pending[j.id].reason == "QOSMaxWallDurationPerJobLimit"
    k = job().tasks(9).nodes(1, 9).build()
    assert validate(k.spec, c.snapshot(), SchedulerConfig()).reason == "QOSMaxCpuPerJobLimit"  # type: ignore[union-attr]


def test_account_and_qos_must_exist() -> None:
    c = gpu_cluster()
    c.add_account("physics", users=["alice"])
    c.add_qos("normal")
    assert validate(job().account("chem").build().spec, c.snapshot(),
                    SchedulerConfig()).reason == "InvalidAccount"  # type: ignore[union-attr]
    assert "not a member" in validate(job().account("physics").user("bob").build().spec,  # type: ignore[union-attr]
                                      c.snapshot(), SchedulerConfig()).message
    assert validate(job().account("physics").user("alice").build().spec, c.snapshot(),
                    SchedulerConfig()) is None
    assert validate(job().qos("gold").build().spec, c.snapshot(),
                    SchedulerConfig()).reason == "InvalidQOS"  # type: ignore[union-attr]


def test_partition_allow_lists() -> None:
    c = gpu_cluster()
    c.partition("batch", allow_accounts=frozenset({"physics"}), is_default=True)
    rej = validate(job().account("chem").build().spec, c.snapshot(), SchedulerConfig())
    assert rej is not None and rej.reason == "PartitionConfig"


def test_several_partitions_reject_only_when_none_fits() -> None:
    c = gpu_cluster()
    c.partition("small", ["n003"], max_time_s=60)
    j = job().partition("small", "batch").walltime_s(3600).build()
    assert validate(j.spec, c.snapshot(), SchedulerConfig()) is None
    k = job().partition("small", "batch").walltime_s(10 * 86400).build()
    rej = validate(k.spec, c.snapshot(), SchedulerConfig())
    assert rej is not None and rej.reason == "PartitionTimeLimit"
