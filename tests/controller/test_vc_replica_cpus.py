"""Each aligned replica's own CPUs, from the core's allocation to the replica's process
(issue 14, topologyPolicy): the controller lists them slot by slot (CORRAL_VC_CPUS,
logical CPUs through the node's core numbering), the batch program pins a replica on its
node to them (its CPU affinity) and binds one elsewhere through srun; a job's run on a
node holds every entry it has there (one per task group)."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from corral.controller.kube_objects import (
    layout,
    layout_text,
    replica_cpus_text,
    replica_gpus_text,
)
from corral.controller.records import JobRecord
from corral.controller.scheduler import node_share
from corral.core import run_cycle
from corral.core.config import SchedulerConfig
from corral.core.model.job import Allocation, Job, JobState, NodeAllocation
from corral.core.model.node import GpuSpec, Node, NodeSpec, NodeState
from corral.core.model.partition import Partition
from corral.core.snapshot import ClusterSnapshot
from corral.frontends.volcano import parse_job
from corral.frontends.volcano_run import Launcher, own_gpus, parse_cpus, pin_set, remote_argv


def _manifest(*tasks: tuple[str, int, int, str | None], gpus: int = 0) -> dict[str, Any]:
    out = []
    for name, replicas, cpu, policy in tasks:
        req: dict[str, Any] = {"cpu": cpu}
        if gpus:
            req["nvidia.com/gpu"] = gpus
        t: dict[str, Any] = {"name": name, "replicas": replicas, "template": {"spec": {
            "containers": [{"name": name, "image": "busybox", "command": ["true"],
                            "resources": {"requests": req}}]}}}
        if policy:
            t["topologyPolicy"] = policy
        out.append(t)
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": "nj"}, "spec": {"tasks": out}}


def _placed(manifest: dict[str, Any], spec: NodeSpec) -> JobRecord:
    sub = parse_job(manifest).submission
    snap = ClusterSnapshot(nodes=(Node(spec, NodeState.IDLE),),
                           partitions=(Partition("main", (spec.name,), is_default=True),),
                           pending=(Job(1, sub.spec, 0.0),))
    r = run_cycle(snap, SchedulerConfig(), 1.0)
    assert r.starts, r.pending
    return JobRecord(id=1, sub=sub, submit_time=0.0, allocation=r.starts[0].allocation)


def test_replica_cpus_follow_the_allocation_slot_by_slot_with_hyperthreads() -> None:
    # 2 sockets x 3 cores x 2 threads: core c has CPUs c and c + 6 (Linux's numbering)
    spec = NodeSpec("n1", 2, 3, 2, 8000)
    rec = _placed(_manifest(("w", 2, 4, "single-numa-node"), ("p", 1, 1, None)), spec)
    text = replica_cpus_text(rec, {"n1": spec}.get)
    cpus = parse_cpus(text)
    assert set(cpus) == {"w"}  # only the aligned task
    assert len(cpus["w"]) == len(layout(rec)["w"]) == 2
    assert sorted(sorted(s) for s in cpus["w"]) == [[0, 1, 6, 7], [3, 4, 9, 10]]
    assert replica_cpus_text(rec, lambda n: None) == "w=|"  # an unknown node: no CPUs
    plain = _placed(_manifest(("w", 2, 2, "best-effort")), spec)
    assert replica_cpus_text(plain, {"n1": spec}.get) == ""


def test_a_node_share_holds_every_entry_of_the_node() -> None:
    a = NodeAllocation("n1", (0, 1), 2, 100, (0,), ("a100",), (("fpga", 1),), 1, "a")
    b = NodeAllocation("n1", (4, 5, 6), 3, 200, (), (), (("fpga", 1),), 2, "b")
    c = NodeAllocation("n2", (0,), 1, 50, (), (), (), 1, "a")
    alloc = Allocation("main", (a, c, b))
    got = node_share(alloc, "n1")
    assert (got.cores, got.cpus, got.mem_mb, got.gpus, got.gres, got.tasks) == (
        (0, 1, 4, 5, 6), 5, 300, (0,), (("fpga", 2),), 3)
    assert node_share(alloc, "n2") is c


def test_the_batch_program_pins_local_replicas_and_binds_remote_ones(tmp_path: Path) -> None:
    spec = NodeSpec("n1", 2, 2, 1, 8000)
    rec = _placed(_manifest(("w", 2, 2, "single-numa-node")), spec)
    env = {"CORRAL_JOB_ID": "1", "SLURMD_NODENAME": "n1", "CORRAL_SUBMIT_DIR": str(tmp_path),
           "CORRAL_VC_LAYOUT": layout_text(rec),
           "CORRAL_VC_CPUS": replica_cpus_text(rec, {"n1": spec}.get)}
    plan = parse_job(_manifest(("w", 2, 2, "single-numa-node"))).plan
    la = Launcher(plan, env)
    assert sorted(r.cpus for r in la.replicas) == [(0, 1), (2, 3)]
    # CPUs this process may not use are dropped; none left: not pinned at all
    have = os.sched_getaffinity(0)
    assert pin_set((0, 1, 999)) == {0, 1} & have and pin_set((999,)) == set()
    # a replica on this node really runs with its own CPUs
    cpu = min(have)
    (tmp_path / "aff.py").write_text("import os; print(sorted(os.sched_getaffinity(0)))")
    r = la.replicas[0]
    r.cpus = (cpu,)
    r.task = dict(r.task, argv=[sys.executable, str(tmp_path / "aff.py")], env={})
    la.client = _NoApi()
    la.start(r)
    assert r.proc is not None and r.proc.wait(timeout=30) == 0
    log = la.dir / f"nj-w-{r.index}.log"
    assert log.read_text() == f"[{cpu}]\n"


def test_a_remote_replica_is_bound_by_srun_to_its_cpus(tmp_path: Path) -> None:
    plan = parse_job(_manifest(("w", 2, 2, "single-numa-node"))).plan
    env = {"CORRAL_JOB_ID": "1", "SLURMD_NODENAME": "n1", "CORRAL_SUBMIT_DIR": str(tmp_path),
           "CORRAL_VC_LAYOUT": "w=n2:1,n3:1", "CORRAL_VC_CPUS": "w=2,3|"}
    la = Launcher(plan, env)
    bound, unknown = la.replicas
    argv = remote_argv(bound, "nj-w-0", ["true"], None)
    assert argv[-1] == "true" and argv[argv.index("-w") + 1] == "n2"
    assert "--cpu-bind=mask_cpu:0xc" in argv  # CPUs 2 and 3
    assert not any(a.startswith("--cpu-bind") for a in remote_argv(unknown, "p", ["true"],
                                                                   "/tmp"))


def test_replicas_get_their_own_gpus_of_their_domain(tmp_path: Path) -> None:
    # GPUs 0, 1 on domain 0 (cores 0-3), GPUs 2, 3 on domain 1 (cores 4-7)
    spec = NodeSpec("n1", 2, 4, 1, 8000, tuple(GpuSpec(g, numa=g // 2) for g in range(4)))
    rec = _placed(_manifest(("w", 2, 2, "single-numa-node"), gpus=2), spec)
    text = replica_gpus_text(rec)
    got = parse_cpus(text)["w"]
    cpus = parse_cpus(replica_cpus_text(rec, {"n1": spec}.get))["w"]
    for c, g in zip(cpus, got, strict=True):  # each replica's GPUs on its cores' domain
        assert {x // 4 for x in c} == {x // 2 for x in g} and len(g) == 2
    assert replica_gpus_text(_placed(_manifest(("w", 2, 2, "best-effort"), gpus=1),
                                     spec)) == ""
    assert own_gpus((2, 3), "0,1,2,3") == {"CUDA_VISIBLE_DEVICES": "2,3",
                                           "GPU_DEVICE_ORDINAL": "2,3"}
    assert own_gpus((5,), "0,1") == {} and own_gpus((), "0,1") == {}
    plan = parse_job(_manifest(("w", 1, 2, "single-numa-node"), gpus=2)).plan
    la = Launcher(plan, {"CORRAL_JOB_ID": "1", "SLURMD_NODENAME": "n1",
                         "CORRAL_SUBMIT_DIR": str(tmp_path), "CORRAL_VC_LAYOUT": "w=n2:1",
                         "CORRAL_VC_CPUS": "w=4,5", "CORRAL_VC_GPUS": "w=2,3"})
    argv = remote_argv(la.replicas[0], "nj-w-0", ["true"], None)
    assert "--gpu-bind=mask_gpu:0xc" in argv and "--cpu-bind=mask_cpu:0x30" in argv


class _NoApi:
    def start_step(self, *a: Any, **kw: Any) -> int:
        return 1

    def end_step(self, *a: Any, **kw: Any) -> None:
        return None


def test_the_stored_allocation_keeps_each_replicas_cores_in_order() -> None:
    """The store's JSON keeps an aligned entry's cores task by task (not sorted), so a
    recovered controller gives each replica the same CPUs."""
    from corral.controller.records import allocation_from_json, allocation_to_json
    from corral.core.model.node import NumaDomain

    spec = NodeSpec("n1", 1, 8, 1, 8000, numa=(NumaDomain(0, (0, 2, 4, 6)),
                                               NumaDomain(1, (1, 3, 5, 7))))
    busy = NodeAllocation("n1", (0,), 1, 10)
    snap = ClusterSnapshot(nodes=(Node(spec, NodeState.IDLE),),
                           partitions=(Partition("main", ("n1",), is_default=True),),
                           pending=(Job(2, parse_job(_manifest(
                               ("w", 2, 3, "single-numa-node"))).submission.spec, 0.0),),
                           running=(replace(Job(1, parse_job(_manifest(
                               ("x", 1, 1, None))).submission.spec, 0.0),
                               state=JobState.RUNNING, start_time=0.0, time_limit_s=100,
                               allocation=Allocation("main", (busy,)), partition="main"),))
    alloc = run_cycle(snap, SchedulerConfig(), 1.0).starts[0].allocation
    cores = alloc.nodes[0].cores
    assert cores == (2, 4, 6, 1, 3, 5)  # even cores one replica, odd ones the other
    assert allocation_from_json(allocation_to_json(alloc)) == alloc
