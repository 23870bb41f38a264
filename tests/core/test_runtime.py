"""Runtime classes in the core: VM jobs need the ``vm`` feature, one node, their memory
plus the overhead; VM, container and host jobs share nodes by the same rules."""

from __future__ import annotations

import pytest

from corral.core.config import SchedulerConfig
from corral.core.cycle import run_cycle
from corral.core.feasibility import validate
from corral.core.model.job import JobSpec
from corral.core.model.node import Node, NodeState
from corral.core.model.partition import Partition
from corral.core.runtime import RuntimeConflict, effective_runtime, with_feature
from corral.core.shape import ShapeError, build_shape
from tests.builders import Cluster, job, node_spec

CFG = SchedulerConfig(vm_mem_overhead_mb=64)


def vm_cluster() -> Cluster:
    """n1: a VM-capable node (8 cores, 4000 MB); n2: no KVM."""
    nodes = [Node(node_spec("n1", 1, 8, 4000, features=("vm",)), NodeState.IDLE),
             Node(node_spec("n2", 1, 8, 4000), NodeState.IDLE)]
    c = Cluster(nodes, [])
    c.partition("batch", is_default=True)
    return c


def test_effective_runtime_rules() -> None:
    assert effective_runtime("host", None) == "host"
    assert effective_runtime("vm", None) == "vm"
    assert effective_runtime("host", "vm") == "vm"  # the partition imposes its class
    assert effective_runtime("vm", "vm") == "vm"
    with pytest.raises(RuntimeConflict, match="partition runs vm jobs"):
        effective_runtime("container", "vm")
    with pytest.raises(RuntimeConflict, match="unknown runtime"):
        effective_runtime("lxc", None)
    assert with_feature(None, "vm") == "vm"
    assert with_feature("avx2|ib", "vm") == "vm&(avx2|ib)"


def test_vm_shape_needs_the_feature_one_node_and_counts_the_overhead() -> None:
    part = Partition("p", ())
    s = build_shape(JobSpec(runtime="vm", mem_per_node_mb=1000, constraint="avx2"), part, CFG)
    assert s.constraint == "vm&(avx2)" and s.single.mem_overhead_mb == 64
    host = build_shape(JobSpec(mem_per_node_mb=1000), part, CFG)
    assert host.constraint is None and host.single.mem_overhead_mb == 0
    with pytest.raises(ShapeError) as err:
        build_shape(JobSpec(runtime="vm", nodes_min=2), part, CFG)
    assert err.value.reason == "BadRuntime" and "one node" in err.value.message
    forced = build_shape(JobSpec(), Partition("v", (), runtime="vm"), CFG)
    assert forced.constraint == "vm"
    with pytest.raises(ShapeError, match="partition runs vm"):
        build_shape(JobSpec(runtime="container"), Partition("v", (), runtime="vm"), CFG)


def test_vm_job_lands_on_the_vm_node_with_memory_plus_overhead() -> None:
    c = vm_cluster()
    j = job().spec(runtime="vm").cpus(2).mem(1000).build()
    r = run_cycle(c.snapshot(pending=[j]), CFG, 0.0)
    (start,) = r.starts
    (na,) = start.allocation.nodes
    assert na.node == "n1" and na.mem_mb == 1064 and len(na.cores) == 2
    # per-CPU memory: 2 CPUs x 300 MB + 64
    j2 = job().spec(runtime="vm").cpus(2).mem_per_cpu(300).build()
    (s2,) = run_cycle(c.snapshot(pending=[j2]), CFG, 0.0).starts
    assert s2.allocation.nodes[0].mem_mb == 664


def test_vm_job_without_a_vm_node_is_rejected_and_overhead_can_block() -> None:
    c = vm_cluster()
    c.partition("novm", nodes=["n2"])
    j = job().spec(runtime="vm").partition("novm").build()
    rej = validate(j.spec, c.snapshot(), CFG, job_id=j.id)
    assert rej is not None and rej.reason == "BadConstraints", rej
    # 3990 MB fits a 4000 MB node as a host job, not as a VM job (3990 + 64)
    host = job().mem(3990).nodelist("n1").build()
    assert run_cycle(c.snapshot(pending=[host]), CFG, 0.0).starts
    vm = job().spec(runtime="vm").mem(3990).build()
    r = run_cycle(c.snapshot(pending=[vm]), CFG, 0.0)
    assert not r.starts


def test_two_vm_jobs_and_a_host_job_share_a_node_without_sharing_cores() -> None:
    c = vm_cluster()
    c.partition("batch", nodes=["n1"], is_default=True)
    a = job().spec(runtime="vm").cpus(2).mem(500).build()
    b = job().spec(runtime="vm").cpus(3).mem(500).build()
    h = job().cpus(3).mem(500).build()
    r = run_cycle(c.snapshot(pending=[a, b, h]), CFG, 0.0)
    assert sorted(s.job_id for s in r.starts) == sorted([a.id, b.id, h.id])
    cores = [set(s.allocation.nodes[0].cores) for s in r.starts]
    assert all(s.allocation.nodes[0].node == "n1" for s in r.starts)
    assert sum(len(x) for x in cores) == 8 and len(set().union(*cores)) == 8
    assert sum(s.allocation.nodes[0].mem_mb for s in r.starts) == 1500 + 2 * 64
    # a fourth job finds no core left
    d = job().spec(runtime="vm").build()
    r2 = run_cycle(c.snapshot(pending=[a, b, h, d]), CFG, 0.0)
    assert d.id not in {s.job_id for s in r2.starts}
