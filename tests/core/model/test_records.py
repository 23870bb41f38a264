from __future__ import annotations

from corral.core.model import (
    Account,
    AccountTree,
    Allocation,
    Association,
    GpuSpec,
    JobSpec,
    NodeAllocation,
    NodeSpec,
    NodeState,
    NumaDomain,
    Resources,
)


def test_node_spec_topology() -> None:
    n = NodeSpec("g1", sockets=2, cores_per_socket=4, threads_per_core=2, mem_mb=1000,
                 gpus=(GpuSpec(0, "a100"), GpuSpec(1, "a100"), GpuSpec(2, "t4")))
    assert n.cores == 8 and n.cpus == 16
    assert n.socket_of(5) == 1 and n.numa_of(5) == 1
    assert n.numa_domains() == (NumaDomain(0, (0, 1, 2, 3), 500), NumaDomain(1, (4, 5, 6, 7), 500))
    assert n.cpus_of_core(1) == (1, 9)
    assert n.gpu_types() == {"a100": 2, "t4": 1}
    assert n.capacity == Resources.of(16, 1000, 3, {"gpu:a100": 2, "gpu:t4": 1})
    explicit = NodeSpec("x", cores_per_socket=2, numa=(NumaDomain(7, (0, 1)),),
                        core_cpus=((0,), (1,)))
    assert explicit.numa_of(1) == 7 and explicit.cpus_of_core(1) == (1,)


def test_node_state_flags() -> None:
    assert NodeState.IDLE.schedulable and NodeState.MIXED.schedulable
    assert not NodeState.DRAINING.schedulable and NodeState.DRAINING.runs_jobs
    assert not NodeState.DOWN.runs_jobs


def test_allocation_totals() -> None:
    a = Allocation("batch", (
        NodeAllocation("n1", (0, 1), 2, 100, gpus=(0,), gpu_types=("a100",), tasks=2),
        NodeAllocation("n2", (0,), 1, 50, gres=(("nvme", 1),)),
        NodeAllocation("n1", (2,), 1, 10, group="g"),
    ))
    assert a.node_names == ("n1", "n2")
    assert a.cpus == 4 and a.tasks == 4
    assert a.resources == Resources.of(4, 160, 1, {"gpu:a100": 1, "nvme": 1})


def test_job_spec_max_nodes() -> None:
    assert JobSpec(nodes_min=2).max_nodes == 2
    assert JobSpec(nodes_min=2, nodes_max=5).max_nodes == 5


def test_account_tree_navigation() -> None:
    t = AccountTree(
        (Account("root", parent=None), Account("science"), Account("chem", parent="science"),
         Account("loop1", parent="loop2"), Account("loop2", parent="loop1")),
        (Association("ann", "chem"), Association("bob", "science")),
    )
    assert [a.name for a in t.children("root")] == ["science"]
    assert [a.name for a in t.children("science")] == ["chem"]
    assert [a.user for a in t.users_of("chem")] == ["ann"]
    assert t.account("nope") is None
    assert t.ancestors("chem") == ["chem", "science"]
    assert t.ancestors("loop1") == ["loop1", "loop2"]  # cycles terminate
