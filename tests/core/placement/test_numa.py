"""NUMA policies of task groups (Volcano ``topologyPolicy``, issue 14): single-numa-node
replicas each in one domain, restricted replicas in the fewest domains that hold them,
waiting with a TopologyAffinityError detail, refused at submit when no domain is large
enough; the field round-trips through the submission's JSON."""

from __future__ import annotations

import pytest
from builders import Cluster, alloc_on, cluster, config, job, node_spec

from corral.core import run_cycle
from corral.core.feasibility import validate
from corral.core.model.job import Allocation, JobSpec, JobState, TaskGroup
from corral.core.model.node import GpuSpec, Node, NodeSpec, NodeState, NumaDomain
from corral.core.placement import Placer, task_cores
from corral.submission import JobSubmission


def _running(cores: list[int], node: str = "n001") -> object:
    j = job(1).walltime_s(1000).build()
    from dataclasses import replace

    return replace(j, state=JobState.RUNNING, start_time=0.0, time_limit_s=1000,
                   allocation=Allocation("batch", (alloc_on(node, cores, 100),)),
                   partition="batch")


def _domains(start: object, cpus: int, per: int = 4) -> list[set[int]]:
    out = []
    for na in start.allocation.nodes:  # type: ignore[attr-defined]
        for cores in task_cores(na, cpus):
            assert len(cores) == cpus
            out.append({c // per for c in cores})
    return out


def _start(c: Cluster, spec_job: object, running: list[object] = ()) -> object | None:  # type: ignore[assignment]
    r = run_cycle(c.snapshot(pending=[spec_job], running=list(running)), config(), 10.0)
    return r.starts[0] if r.starts else r.pending.get(spec_job.id)  # type: ignore[attr-defined]


def test_single_numa_node_puts_each_replica_in_one_domain() -> None:
    c = cluster(nodes=1, sockets=2, cores_per_socket=4)
    g = job(2).group("w", replicas=2, cpus=3, numa="single-numa-node").walltime_s(60).build()
    s = _start(c, g, [_running([0])])
    assert [len(d) for d in _domains(s, 3)] == [1, 1]
    na = s.allocation.nodes[0]  # type: ignore[attr-defined]
    assert na.tasks == 2 and sorted(na.cores) == [1, 2, 3, 4, 5, 6] and 0 not in na.cores


def test_single_numa_node_waits_when_no_domain_has_room_and_says_why() -> None:
    c = cluster(nodes=1, sockets=2, cores_per_socket=4)
    busy = _running([0, 1, 4])  # free: 2 and 3 cores; 5 in all
    g = job(2).group("w", replicas=1, cpus=4, numa="single-numa-node").walltime_s(60).build()
    p = _start(c, g, [busy])
    assert p.reason == "Resources"  # type: ignore[attr-defined]
    assert "TopologyAffinityError" in p.detail and "single-numa-node" in p.detail  # type: ignore[attr-defined]
    assert "from one NUMA domain" in p.detail and "hold 0 now" in p.detail  # type: ignore[attr-defined]
    plain = job(3).group("w", replicas=1, cpus=4).walltime_s(60).build()
    s = _start(c, plain, [busy])
    assert s.allocation.nodes[0].cores == (2, 5, 6, 7)  # type: ignore[attr-defined]


def test_a_replica_larger_than_every_domain_is_refused_at_submit() -> None:
    c = cluster(nodes=2, sockets=2, cores_per_socket=4, gpus_per_node=2)
    big = job(2).group("w", 2, cpus=5, numa="single-numa-node").walltime_s(60).build()
    rej = validate(big.spec, c.snapshot(pending=[big]), config())
    assert rej is not None and rej.reason == "NodeConfigUnavailable"
    assert rej.message == (
        "task group 'w' asks for 5 CPUs per replica from one NUMA domain (topologyPolicy "
        "single-numa-node) but the largest NUMA domain of partition batch's nodes has 4 CPUs")
    gpus = job(3).group("w", 1, cpus=2, gpus=2, numa="single-numa-node").walltime_s(60).build()
    rej = validate(gpus.spec, c.snapshot(pending=[gpus]), config())
    assert rej is not None and "2 CPUs and 2 GPUs per replica" in rej.message
    assert rej.message.endswith("has 4 CPUs and at most 1 GPUs")
    for ok in (job(4).group("w", 2, cpus=5, numa="restricted").walltime_s(60).build(),
               job(5).group("w", 2, cpus=5).walltime_s(60).build()):
        assert validate(ok.spec, c.snapshot(pending=[ok]), config()) is None


def test_single_numa_node_gpus_come_from_the_replicas_domain() -> None:
    c = cluster(nodes=1, sockets=2, cores_per_socket=4, gpus_per_node=2)  # GPU k on domain k
    g = job(2).group("w", 2, cpus=2, gpus=1, numa="single-numa-node").walltime_s(60).build()
    s = _start(c, g)
    na = s.allocation.nodes[0]  # type: ignore[attr-defined]
    for k, cores in enumerate(task_cores(na, 2)):
        assert {x // 4 for x in cores} == {na.gpus[k]}, na
    # GPU 0 busy: a one-GPU replica goes to domain 1 even with domain 0's cores free
    busy = job(1).build()
    from dataclasses import replace

    busy = replace(busy, state=JobState.RUNNING, start_time=0.0, time_limit_s=1000,
                   allocation=Allocation("batch", (alloc_on("n001", [7], 100, gpus=[0]),)),
                   partition="batch")
    one = job(3).group("w", 1, cpus=2, gpus=1, numa="single-numa-node").walltime_s(60).build()
    na = _start(c, one, [busy]).allocation.nodes[0]  # type: ignore[attr-defined]
    assert na.gpus == (1,) and na.cores == (4, 5)


def test_gpus_without_numa_affinity_go_with_any_replica() -> None:
    spec = NodeSpec("n001", 2, 4, 1, 16000, (GpuSpec(0), GpuSpec(1)))
    c = Cluster([Node(spec, NodeState.IDLE)], [])
    c.partition("batch", is_default=True)
    g = job(2).group("w", 2, cpus=4, gpus=1, numa="single-numa-node").walltime_s(60).build()
    na = _start(c, g).allocation.nodes[0]  # type: ignore[attr-defined]
    assert [{x // 4 for x in t} for t in task_cores(na, 4)] == [{0}, {1}]
    assert sorted(na.gpus) == [0, 1]


def test_restricted_takes_the_fewest_domains_best_effort_may_take_more() -> None:
    c = cluster(nodes=1, sockets=4, cores_per_socket=4)
    busy = _running([0, 1, 4, 5])  # free per domain: 2, 2, 4, 4
    tight = job(2).group("w", 2, cpus=6, numa="restricted").walltime_s(60).build()
    s = _start(c, tight, [busy])
    doms = _domains(s, 6)
    assert [len(d) for d in doms] == [2, 2] and not doms[0] & doms[1]
    loose = job(3).group("w", 2, cpus=6).walltime_s(60).build()
    s = _start(c, loose, [busy])
    assert max(len(d) for d in _domains(s, 6)) == 3  # the node's cores in order: 3 domains


def test_restricted_waits_when_no_set_of_the_fewest_domains_has_room() -> None:
    c = cluster(nodes=1, sockets=4, cores_per_socket=4)
    busy = _running([0, 1, 4, 5, 8, 9, 12, 13])  # 2 free in each domain
    tight = job(2).group("w", 1, cpus=6, numa="restricted").walltime_s(60).build()
    p = _start(c, tight, [busy])
    assert p.reason == "Resources" and "TopologyAffinityError" in p.detail  # type: ignore[attr-defined]
    assert "topologyPolicy restricted" in p.detail  # type: ignore[attr-defined]
    loose = job(3).group("w", 1, cpus=6, numa="best-effort").walltime_s(60).build()
    assert _start(c, loose, [busy]).allocation is not None  # type: ignore[attr-defined]


def test_restricted_width_follows_each_nodes_hardware() -> None:
    """6 cores: one domain on a node of 8-core domains, two on one of 4-core domains."""
    c = Cluster([Node(node_spec("n001", 4, 4), NodeState.IDLE),
                 Node(node_spec("n002", 2, 8), NodeState.IDLE)], [])
    c.partition("batch", is_default=True)
    g = job(2).group("w", 3, cpus=6, numa="restricted").walltime_s(60).build()
    s = _start(c, g)
    per_node = {na.node: [{x // (4 if na.node == "n001" else 8) for x in t}
                          for t in task_cores(na, 6)]
                for na in s.allocation.nodes}  # type: ignore[attr-defined]
    assert sum(map(len, per_node.values())) == 3 and set(per_node) == {"n001", "n002"}
    assert all(len(d) == 2 for d in per_node["n001"])
    assert all(len(d) == 1 for d in per_node["n002"])


def test_explicit_numa_domains_that_interleave_cores() -> None:
    """Domains need not be runs of core ids: even and odd cores here."""
    spec = NodeSpec("n001", 1, 8, 1, 16000,
                    numa=(NumaDomain(0, (0, 2, 4, 6)), NumaDomain(1, (1, 3, 5, 7))))
    c = Cluster([Node(spec, NodeState.IDLE)], [])
    c.partition("batch", is_default=True)
    g = job(2).group("w", 2, cpus=3, numa="single-numa-node").walltime_s(60).build()
    na = _start(c, g, [_running([0])]).allocation.nodes[0]  # type: ignore[attr-defined]
    assert [{x % 2 for x in t} for t in task_cores(na, 3)] in ([{0}, {1}], [{1}, {0}])


def test_an_exclusive_gang_gets_aligned_replicas_and_the_rest_of_the_node() -> None:
    c = cluster(nodes=1, sockets=2, cores_per_socket=4)
    g = job(2).group("w", 2, cpus=3, numa="single-numa-node").spec(exclusive=True)
    na = _start(c, g.walltime_s(60).build()).allocation.nodes[0]  # type: ignore[attr-defined]
    assert sorted(na.cores) == list(range(8))
    assert [len({x // 4 for x in t}) for t in task_cores(na, 3)] == [1, 1]


def test_two_numa_groups_and_a_plain_one_share_a_node_without_overlap() -> None:
    c = cluster(nodes=1, sockets=4, cores_per_socket=4)
    g = (job(2).group("a", 2, cpus=3, numa="single-numa-node")
         .group("b", 1, cpus=4).group("c", 1, cpus=5, numa="restricted").walltime_s(60).build())
    s = _start(c, g)
    seen: set[int] = set()
    for na in s.allocation.nodes:  # type: ignore[attr-defined]
        assert not seen & set(na.cores)
        seen |= set(na.cores)
        if na.group == "a":
            assert [len({x // 4 for x in t}) for t in task_cores(na, 3)] == [1, 1]
        if na.group == "c":
            assert len({x // 4 for x in na.cores}) == 2
    assert len(seen) == 15


def test_unknown_policy_is_refused_and_the_field_round_trips() -> None:
    c = cluster(nodes=1)
    bad = job(2).group("w", 1, numa="numa-please").walltime_s(60).build()
    rej = validate(bad.spec, c.snapshot(pending=[bad]), config())
    assert rej is not None and rej.reason == "BadTaskGroup" and "numa-please" in rej.message
    spec = JobSpec(task_groups=(TaskGroup("w", 2, 3, numa_policy="single-numa-node"),))
    sub = JobSubmission(spec=spec, argv=("true",))
    assert JobSubmission.from_json(sub.to_json()).spec == spec
    old = sub.to_json()
    del old["spec"]["task_groups"][0]["numa_policy"]  # a record stored before the field
    assert JobSubmission.from_json(old).spec.task_groups[0].numa_policy == "none"


@pytest.mark.parametrize("policy", ["none", "best-effort", "restricted", "single-numa-node"])
def test_every_policy_places_a_job_that_fits_a_domain(policy: str) -> None:
    c = cluster(nodes=1, sockets=2, cores_per_socket=4)
    g = job(2).group("w", 2, cpus=4, numa=policy).walltime_s(60).build()
    s = _start(c, g)
    assert [len(d) for d in _domains(s, 4)] == [1, 1]


def test_slots_chosen_on_another_view_are_chosen_again_on_commit() -> None:
    """A pick's aligned slots are taken as they are only where the pool still holds
    them free; otherwise the placer chooses again on the pool (never a core twice)."""
    from corral.core.config import PlacementMode
    from corral.core.nodes import NodeTable
    from corral.core.pool import Pool
    from corral.core.shape import build_shape

    c = cluster(nodes=1, sockets=2, cores_per_socket=4)
    table = NodeTable(c.nodes, c.partitions)
    g = job(2).group("w", 1, cpus=3, numa="single-numa-node").walltime_s(60).build()
    shape = build_shape(g.spec, c.partitions[0], config())
    placer = Placer(table, PlacementMode.PACK)
    empty = Pool(table, table.all_mask)
    chosen = placer.fits(shape, "batch", empty)
    assert chosen is not None and chosen[0][0].numa_slots[0][0] == 0b111  # domain 0
    busy = Pool(table, table.all_mask)
    from corral.core.pool import NodeUse

    busy.take(NodeUse(0, 0b0001, 0, 0, ()))  # core 0 is gone meanwhile
    placed = placer.commit(shape, "batch", busy, chosen)
    cores = placed.allocation.nodes[0].cores
    assert 0 not in cores and len({x // 4 for x in cores}) == 1, cores
