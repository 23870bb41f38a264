"""Table-driven scheduling scenarios with expected decisions (strict, EASY, conservative)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from builders import Cluster, cluster, job

from corral.core import run_cycle
from corral.core.config import BackfillMode, Ordering, SchedulerConfig
from corral.core.model.job import Job


def cfg(mode: BackfillMode, **kw: object) -> SchedulerConfig:
    return SchedulerConfig(ordering=Ordering.FCFS, backfill=mode, bf_resolution_s=1, **kw)  # type: ignore[arg-type]


def base() -> tuple[Cluster, list[Job]]:
    """4 nodes x 8 cores; job 1 runs on n001+n002 until t=100."""
    c = cluster(nodes=4, sockets=2, cores_per_socket=4)
    running = [job(1).walltime_s(100).running_on(("n001", 8), ("n002", 8), start=0).build()]
    return c, running


@dataclass
class Case:
    name: str
    mode: BackfillMode
    pending: list[Job]
    starts: set[int]
    reasons: dict[int, str] = field(default_factory=dict)
    est: dict[int, float] = field(default_factory=dict)


CASES = [
    Case("strict: blocked head blocks a small later job", BackfillMode.NONE,
         [job(10).nodes(4).walltime_s(50).build(), job(11).walltime_s(10).build()],
         starts=set(), reasons={10: "Resources", 11: "Priority"}, est={10: 100.0}),
    Case("strict: jobs that fit start in order", BackfillMode.NONE,
         [job(10).exclusive().walltime_s(50).build(), job(11).exclusive().walltime_s(10).build(),
          job(12).exclusive().walltime_s(10).build()],
         starts={10, 11}, reasons={12: "Resources"}),
    Case("easy: short job backfills before the shadow time", BackfillMode.EASY,
         [job(10).nodes(4).walltime_s(50).build(), job(11).exclusive().walltime_s(100).build()],
         starts={11}, reasons={10: "Resources"}, est={10: 100.0}),
    Case("easy: long job would delay the reservation", BackfillMode.EASY,
         [job(10).nodes(4).walltime_s(50).build(), job(11).exclusive().walltime_s(101).build()],
         starts=set(), reasons={10: "Resources", 11: "Priority"}),
    Case("easy: extra-resources rule lets a long job use a node the reservation spares",
         BackfillMode.EASY,
         [job(10).nodes(3).exclusive().walltime_s(50).build(),
          job(11).exclusive().walltime_s(10_000).build(),
          job(12).exclusive().walltime_s(10_000).build()],
         starts={11}, reasons={10: "Resources", 12: "Priority"}, est={10: 100.0}),
    Case("conservative: every blocked job gets a reservation", BackfillMode.CONSERVATIVE,
         [job(10).nodes(4).exclusive().walltime_s(50).build(),
          job(11).nodes(2).exclusive().walltime_s(500).build(),
          job(12).exclusive().walltime_s(40).build()],
         starts={12}, reasons={10: "Resources", 11: "Priority"},
         est={10: 100.0, 11: 150.0}),
    Case("partial-node jobs share nodes core by core", BackfillMode.EASY,
         [job(10).cpus(3).walltime_s(50).build(), job(11).cpus(5).walltime_s(50).build(),
          job(12).tasks(8).walltime_s(50).build()],
         starts={10, 11, 12}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_scenario(case: Case) -> None:
    c, running = base()
    snap = c.snapshot(pending=case.pending, running=running)
    r = run_cycle(snap, cfg(case.mode), 0.0)
    assert {s.job_id for s in r.starts} == case.starts
    for jid, reason in case.reasons.items():
        assert r.pending[jid].reason == reason, r.pending[jid]
    for jid, t in case.est.items():
        assert r.pending[jid].est_start == t
    assert not r.rejects
    assert set(r.pending) == {j.id for j in case.pending} - case.starts


def test_start_records_exact_allocation_and_time_limit() -> None:
    c, running = base()
    snap = c.snapshot(pending=[job(10).nodes(2).tasks_per_node(2).cpus(2).walltime_s(60)
                               .mem_per_cpu(500).build()], running=running)
    r = run_cycle(snap, cfg(BackfillMode.EASY), 0.0)
    (s,) = r.starts
    assert s.time_limit_s == 60
    assert s.allocation.node_names == ("n003", "n004")
    for na in s.allocation.nodes:
        assert na.cpus == 4 and len(na.cores) == 4 and na.tasks == 2 and na.mem_mb == 2000
        # four cores from one socket (cores 0-3 are socket 0)
        assert set(na.cores) == {0, 1, 2, 3}


def test_nodes_max_none_means_exactly_nodes_min() -> None:
    c = cluster(nodes=4)
    r = run_cycle(c.snapshot(pending=[job(1).nodes(2).build()]), cfg(BackfillMode.EASY), 0.0)
    assert len(r.starts[0].allocation.nodes) == 2


def test_node_range_takes_as_many_as_free() -> None:
    c, running = base()
    snap = c.snapshot(pending=[job(10).nodes(1, 4).build()], running=running)
    r = run_cycle(snap, cfg(BackfillMode.EASY), 0.0)
    assert r.starts[0].allocation.node_names == ("n003", "n004")


def test_flexible_tasks_pack_onto_fewest_nodes() -> None:
    c = cluster(nodes=4, sockets=2, cores_per_socket=4)
    spec_job = job(1).tasks(12).nodes(1, 12).walltime_s(10).build()
    r = run_cycle(c.snapshot(pending=[spec_job]), cfg(BackfillMode.EASY), 0.0)
    alloc = r.starts[0].allocation
    assert sorted(n.tasks for n in alloc.nodes) == [4, 8]
    assert alloc.tasks == 12


def test_exclusive_takes_whole_nodes() -> None:
    c = cluster(nodes=2, sockets=2, cores_per_socket=4, mem_mb=16000)
    snap = c.snapshot(pending=[job(1).exclusive().walltime_s(10).build(),
                               job(2).walltime_s(10).build(), job(3).walltime_s(10).build()])
    r = run_cycle(snap, cfg(BackfillMode.EASY), 0.0)
    by = {s.job_id: s for s in r.starts}
    assert by[1].allocation.nodes[0].cpus == 8 and by[1].allocation.nodes[0].mem_mb == 16000
    # the other two share the remaining node
    assert by[2].allocation.node_names == by[3].allocation.node_names == ("n002",)


def test_first_partition_by_priority_tier_then_listed_order() -> None:
    c = cluster(nodes=4)
    c.partition("low", ["n001", "n002"], priority_tier=1)
    c.partition("high", ["n003", "n004"], priority_tier=5)
    r = run_cycle(c.snapshot(pending=[job(1).partition("low", "high").build()]),
                  cfg(BackfillMode.EASY), 0.0)
    assert r.starts[0].allocation.partition == "high"
    c.partition("high", ["n003", "n004"], priority_tier=5, max_time_s=10)
    r = run_cycle(c.snapshot(pending=[job(2).partition("low", "high").walltime_s(60).build()]),
                  cfg(BackfillMode.EASY), 0.0)
    assert r.starts[0].allocation.partition == "low"


def test_strict_blocks_only_overlapping_partitions() -> None:
    c = cluster(nodes=4)
    c.partition("a", ["n001", "n002"])
    c.partition("b", ["n003", "n004"])
    busy = job(9).walltime_s(100).running_on(("n001", 8), partition="a").build()
    snap = c.snapshot(pending=[job(1).partition("a").nodes(2).walltime_s(10).build(),
                               job(2).partition("a").walltime_s(10).build(),
                               job(3).partition("b").walltime_s(10).build(),
                               job(4).partition("a").nodes(3).build()], running=[busy])
    r = run_cycle(snap, cfg(BackfillMode.NONE), 0.0)
    assert {s.job_id for s in r.starts} == {3}
    assert r.pending[1].reason == "Resources" and r.pending[2].reason == "Priority"
    assert [(x.job_id, x.reason) for x in r.rejects] == [(4, "PartitionNodeLimit")]
