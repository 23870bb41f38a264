"""A Volcano Job across hosts: each replica runs on its node of the gang's allocation
(the launcher starts the other nodes' replicas through srun, named after their pods),
the svc plugin's host list names those nodes, and each pod's log holds its output."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.multinode.hosts import NetnsCluster

pytestmark = [pytest.mark.multinode, pytest.mark.root]


def test_replicas_run_on_their_hosts(mn_cluster: NetnsCluster) -> None:
    c = mn_cluster
    manifest = {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "spread"},
        "spec": {"plugins": {"env": [], "svc": []}, "tasks": [{
            "name": "w", "replicas": 3, "template": {"spec": {"containers": [{
                "name": "w", "image": "busybox", "workingDir": str(c.shared),
                "command": ["sh", "-c", "echo $VC_TASK_INDEX $(hostname) $VC_W_HOSTS"],
                # a whole host each: the three replicas land on three hosts
                "resources": {"requests": {"cpu": c.cpus, "memory": "100Mi"}}}]}}}]}}
    jid = int(c.client.request("POST", "/volcano/jobs", manifest)["job_id"])
    job = c.wait_done(jid, 90)
    assert job["state"] == "COMPLETED", (job, c.logs())
    steps = {s["name"]: s for s in job["steps"]}
    assert sorted(steps) == ["spread-w-0", "spread-w-1", "spread-w-2"], job["steps"]
    nodes = [steps[f"spread-w-{i}"]["nodes"][0] for i in range(3)]
    assert sorted(nodes) == sorted(c.names) and all(
        s["state"] == "COMPLETED" for s in steps.values())
    logs = c.shared / ".corral" / f"vcjob-{jid}"
    for i, node in enumerate(nodes):
        assert (logs / f"spread-w-{i}.log").read_text() == f"{i} {node} {','.join(nodes)}\n"


def test_aligned_replicas_on_other_hosts_are_bound_to_their_own_cpus(
        mn_cluster: NetnsCluster) -> None:
    """topologyPolicy single-numa-node: two one-CPU replicas a host; those on the other
    hosts run through srun, bound (--cpu-bind=mask_cpu) to the CPU each was given, and
    every replica's memory to that CPU's NUMA node (node 0: each host has one)."""
    c = mn_cluster
    n = 3 * c.cpus
    manifest = {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "bound"},
        "spec": {"tasks": [{
            "name": "w", "replicas": n, "topologyPolicy": "single-numa-node",
            "template": {"spec": {"containers": [{
                "name": "w", "image": "busybox", "workingDir": str(c.shared),
                "command": ["sh", "-c", "grep Cpus_allowed_list /proc/self/status; grep -m1 "
                            "-oE '(bind|prefer):[0-9,-]+' /proc/self/numa_maps || echo no"],
                "resources": {"requests": {"cpu": 1, "memory": "100Mi"}}}]}}}]}}
    jid = int(c.client.request("POST", "/volcano/jobs", manifest)["job_id"])
    job = c.wait_done(jid, 90)
    assert job["state"] == "COMPLETED", (job, c.logs())
    slots = []  # (node, its CPU) of each replica, in layout order
    for na in job["allocation"]["nodes"]:
        slots += [(na["node"], core) for core in na["cores"]]  # one core a replica
    assert len(slots) == n and len({s[0] for s in slots}) == 3
    logs = c.shared / ".corral" / f"vcjob-{jid}"
    for i, (node, core) in enumerate(slots):
        text = (logs / f"bound-w-{i}.log").read_text().split()
        assert text == ["Cpus_allowed_list:", str(core), "bind:0"], (i, node, text)


def test_aligned_replicas_on_other_hosts_see_only_their_own_gpus(
        mn_cluster_factory: Callable[..., NetnsCluster]) -> None:
    """With GPUs (configured, 2 a host): each one-GPU replica of a single-numa-node task,
    those on the other host through srun --gpu-bind=mask_gpu, sees only its GPU."""
    c = mn_cluster_factory(2, gpus=2)
    manifest = {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "gpus"},
        "spec": {"tasks": [{
            "name": "w", "replicas": 4, "topologyPolicy": "single-numa-node",
            "template": {"spec": {"containers": [{
                "name": "w", "image": "busybox", "workingDir": str(c.shared),
                "command": ["sh", "-c", "echo $CUDA_VISIBLE_DEVICES"],
                "resources": {"requests": {"cpu": 1, "memory": "100Mi",
                                           "nvidia.com/gpu": 1}}}]}}}]}}
    jid = int(c.client.request("POST", "/volcano/jobs", manifest)["job_id"])
    job = c.wait_done(jid, 90)
    assert job["state"] == "COMPLETED", (job, c.logs())
    slots = [(na["node"], g) for na in job["allocation"]["nodes"] for g in na["gpus"]]
    assert len(slots) == 4 and len({s[0] for s in slots}) == 2
    logs = c.shared / ".corral" / f"vcjob-{jid}"
    for i, (node, gpu) in enumerate(slots):
        assert (logs / f"gpus-w-{i}.log").read_text() == f"{gpu}\n", (i, node)
