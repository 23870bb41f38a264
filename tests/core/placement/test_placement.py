"""Placement: node choice by mode, cores/GPUs inside nodes, gangs, switch limits."""

from __future__ import annotations

from builders import alloc_on, cluster, job, node_spec

from corral.core import run_cycle
from corral.core.config import Ordering, PlacementMode, SchedulerConfig
from corral.core.model.job import Allocation
from corral.core.model.node import GpuSpec, Node, NodeSpec, NumaDomain


def cfg(**kw: object) -> SchedulerConfig:
    return SchedulerConfig(ordering=Ordering.FCFS, **kw)  # type: ignore[arg-type]


def start_of(snap, config=None) -> Allocation:  # type: ignore[no-untyped-def]
    r = run_cycle(snap, config or cfg(), 0.0)
    assert len(r.starts) == 1, (r.rejects, r.pending)
    return r.starts[0].allocation


def test_pack_prefers_the_fullest_node_that_fits() -> None:
    c = cluster(nodes=3, sockets=1, cores_per_socket=8)
    running = [job(1).running_on(("n001", 6)).build(), job(2).running_on(("n002", 2)).build()]
    alloc = start_of(c.snapshot(pending=[job(3).cpus(2).build()], running=running))
    assert alloc.node_names == ("n001",) and alloc.nodes[0].cores == (6, 7)


def test_spread_prefers_the_emptiest_node() -> None:
    c = cluster(nodes=3, sockets=1, cores_per_socket=8)
    running = [job(1).running_on(("n001", 6)).build(), job(2).running_on(("n003", 2)).build()]
    alloc = start_of(c.snapshot(pending=[job(3).cpus(2).build()], running=running),
                     cfg(placement=PlacementMode.SPREAD))
    assert alloc.node_names == ("n002",)


def test_cpu_jobs_avoid_gpu_nodes_when_packing() -> None:
    c = cluster(nodes=2, gpus_per_node=2, gpu_nodes=1)
    alloc = start_of(c.snapshot(pending=[job(1).build()]))
    assert alloc.node_names == ("n002",)


def test_cores_from_one_socket_when_they_fit() -> None:
    c = cluster(nodes=1, sockets=2, cores_per_socket=4)
    running = [job(1).running_on(("n001", 1)).build()]  # core 0 busy: socket 0 has 3 free
    alloc = start_of(c.snapshot(pending=[job(2).cpus(4).build()], running=running))
    assert alloc.nodes[0].cores == (4, 5, 6, 7)  # socket 1, not 3 + 1 across sockets
    alloc = start_of(c.snapshot(pending=[job(3).cpus(3).build()], running=running))
    assert alloc.nodes[0].cores == (1, 2, 3)  # best fit: the socket with 3 free


def test_gpus_with_affinity_to_their_cores() -> None:
    spec = NodeSpec(
        "g1", sockets=2, cores_per_socket=4, mem_mb=64000,
        gpus=(GpuSpec(0, "a100", numa=0), GpuSpec(1, "a100", numa=0),
              GpuSpec(2, "a100", numa=1), GpuSpec(3, "a100", numa=1)),
        numa=(NumaDomain(0, (0, 1, 2, 3)), NumaDomain(1, (4, 5, 6, 7))),
    )
    c = cluster(nodes=1)
    c.nodes = [Node(spec)]
    c.partition("batch", ["g1"], is_default=True)
    busy = job(1).running_on(alloc_on("g1", [0], 1000, gpus=[0])).build()
    alloc = start_of(c.snapshot(pending=[job(2).gpus(2).cpus(2).build()], running=[busy]))
    na = alloc.nodes[0]
    assert na.gpus == (2, 3) and set(na.cores) <= {4, 5, 6, 7}
    assert na.gpu_types == ("a100", "a100")


def test_typed_gpus_only_on_matching_nodes() -> None:
    c = cluster(nodes=2)
    c.nodes = [Node(node_spec("a", gpus=2, gpu_type="a100")),
               Node(node_spec("h", gpus=2, gpu_type="h100"))]
    c.partition("batch", ["a", "h"], is_default=True)
    alloc = start_of(c.snapshot(pending=[job(1).gpus(1, "h100").build()]))
    assert alloc.node_names == ("h",) and alloc.nodes[0].gpu_types == ("h100",)


def test_constraints_and_exclude_and_nodelist() -> None:
    c = cluster(nodes=4)
    c.nodes = [Node(node_spec(f"n{k}", features=f)) for k, f in
               enumerate([("ib",), ("ib", "avx512"), ("eth",), ("ib", "avx512")])]
    c.partition("batch", [f"n{k}" for k in range(4)], is_default=True)
    assert start_of(c.snapshot(pending=[job(1).constraint("avx512&ib").build()])
                    ).node_names == ("n1",)
    assert start_of(c.snapshot(pending=[job(1).constraint("avx512").exclude("n1").build()])
                    ).node_names == ("n3",)
    assert start_of(c.snapshot(pending=[job(1).constraint("eth|avx512").build()])
                    ).node_names == ("n1",)
    assert set(start_of(c.snapshot(pending=[job(1).nodes(2).nodelist("n2").build()])
                        ).node_names) == {"n0", "n2"}


def test_topology_uses_one_switch_when_possible() -> None:
    c = cluster(nodes=8, switches=2, sockets=1, cores_per_socket=4)  # sw1: n001-4, sw2: n005-8
    running = [job(1).running_on(("n001", 4)).build()]
    alloc = start_of(c.snapshot(pending=[job(2).nodes(4).exclusive().build()], running=running),
                     cfg(placement=PlacementMode.TOPOLOGY))
    assert alloc.node_names == ("n005", "n006", "n007", "n008")


def test_topology_best_fit_switch() -> None:
    c = cluster(nodes=8, switches=2, sockets=1, cores_per_socket=4)
    running = [job(1).running_on(("n001", 4)).build()]  # sw1 has 3 idle nodes, sw2 has 4
    alloc = start_of(c.snapshot(pending=[job(2).nodes(3).exclusive().build()], running=running),
                     cfg(placement=PlacementMode.TOPOLOGY))
    assert alloc.node_names == ("n002", "n003", "n004")


def test_switch_limit_waits_then_gives_up_waiting() -> None:
    c = cluster(nodes=8, switches=2, sockets=1, cores_per_socket=4)
    running = [job(1).running_on(("n001", 4)).build(), job(2).running_on(("n005", 4)).build()]
    pend = job(3).nodes(4).exclusive().switches(1, wait_s=600).submit(0).build()
    snap = c.snapshot(pending=[pend], running=running)
    r = run_cycle(snap, cfg(), 100.0)
    assert not r.starts and r.pending[3].reason == "Resources"
    r = run_cycle(snap, cfg(), 700.0)
    assert len(r.starts) == 1 and len(r.starts[0].allocation.nodes) == 4


def test_gang_of_task_groups_is_all_or_nothing() -> None:
    c = cluster(nodes=2, sockets=1, cores_per_socket=16, gpus_per_node=2, gpu_nodes=1)
    busy = job(1).running_on(alloc_on("n001", [0], 1000, gpus=[0])).build()
    gang = job(2).group("cfd", 4, cpus=4).group("train", 2, gpus=1).build()
    r = run_cycle(c.snapshot(pending=[gang], running=[busy]), cfg(), 0.0)
    assert not r.starts and not r.rejects  # one GPU is busy: nothing starts, nothing is held
    assert r.pending[2].reason == "Resources"
    alloc = start_of(c.snapshot(pending=[gang]))
    groups: dict[str | None, int] = {}
    for na in alloc.nodes:
        groups[na.group] = groups.get(na.group, 0) + na.tasks
    assert groups == {"cfd": 4, "train": 2}
    assert sum(len(na.gpus) for na in alloc.nodes) == 2
    never = job(3).group("cfd", 4, cpus=4).group("train", 4, gpus=1).build()
    r = run_cycle(c.snapshot(pending=[never]), cfg(), 0.0)
    assert [x.reason for x in r.rejects] == ["NodeConfigUnavailable"]
    assert "task group 'train'" in r.rejects[0].message


def test_gang_min_available_starts_with_a_partial_set() -> None:
    c = cluster(nodes=1, sockets=1, cores_per_socket=8)
    gang = job(1).group("worker", 12, cpus=1).min_available(6).build()
    alloc = start_of(c.snapshot(pending=[gang]))
    assert alloc.tasks == 8  # as many as fit, at least min_available
    gang2 = job(2).group("worker", 12, cpus=1).min_available(9).build()
    assert not run_cycle(c.snapshot(pending=[gang2]), cfg(), 0.0).starts


def test_gpus_per_job_spread_over_nodes() -> None:
    c = cluster(nodes=3, gpus_per_node=4)
    alloc = start_of(c.snapshot(pending=[job(1).gpus_total(6).tasks(6).nodes(1, 6).build()]))
    assert sum(len(n.gpus) for n in alloc.nodes) == 6 and alloc.tasks == 6


def test_hyperthreads_round_cpus_up_to_whole_cores() -> None:
    c = cluster(nodes=1, sockets=1, cores_per_socket=4, threads_per_core=2)
    alloc = start_of(c.snapshot(pending=[job(1).cpus(3).build()]))
    na = alloc.nodes[0]
    assert len(na.cores) == 2 and na.cpus == 4


def test_memory_per_cpu_default_is_the_node_share() -> None:
    c = cluster(nodes=1, sockets=1, cores_per_socket=8, mem_mb=16000)
    alloc = start_of(c.snapshot(pending=[job(1).cpus(2).build()]))
    assert alloc.nodes[0].mem_mb == 4000
    alloc = start_of(c.snapshot(pending=[job(1).cpus(2).build()]),
                     cfg(default_mem_per_cpu_mb=100))
    assert alloc.nodes[0].mem_mb == 200


def test_memory_limits_sharing() -> None:
    c = cluster(nodes=1, sockets=1, cores_per_socket=8, mem_mb=16000)
    running = [job(1).running_on(("n001", 1)).build()]  # holds 1000 MB
    r = run_cycle(c.snapshot(pending=[job(2).mem(15000).build(), job(3).mem(1).build()],
                             running=running), cfg(), 0.0)
    assert [s.job_id for s in r.starts] == [2]


def test_preferred_nodes_first_and_never_a_reason_to_wait() -> None:
    """``prefer_nodes`` (the nodes whose image cache holds a container job's image) win
    over best fit; when none of them fits, the job starts elsewhere at once."""
    c = cluster(nodes=3, sockets=1, cores_per_socket=8)
    running = [job(1).running_on(("n001", 6)).build()]
    plain = start_of(c.snapshot(pending=[job(3).cpus(2).build()], running=running))
    assert plain.node_names == ("n001",)  # best fit without a preference
    pref = start_of(c.snapshot(pending=[job(4).cpus(2).spec(prefer_nodes=("n003",)).build()],
                               running=running))
    assert pref.node_names == ("n003",)
    busy = [job(1).running_on(("n001", 6)).build(), job(2).running_on(("n003", 8)).build()]
    fallback = start_of(c.snapshot(
        pending=[job(5).cpus(2).spec(prefer_nodes=("n003",)).build()], running=busy))
    assert fallback.node_names == ("n001",)  # the preferred node is full: best fit elsewhere
    two = start_of(c.snapshot(
        pending=[job(6).nodes(2).cpus(1).spec(prefer_nodes=("n002", "n003")).build()],
        running=running))
    assert set(two.node_names) == {"n002", "n003"}
