"""Aligned replicas run on their own CPUs (issue 14, topologyPolicy): through the real
kubectl, each single-numa-node replica of a job on one node is pinned to the CPUs its
allocation gave it, while replicas without a policy share the job's CPUs there. The node
is configured as 2 sockets of 1 core (2 NUMA domains: CPU 0 and CPU 1, which every
test host has) and 2 GPUs (configured, without NUMA affinity: they go with any domain;
a replica sees its own in CUDA_VISIBLE_DEVICES)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

import tests.e2e.test_kubectl as kt
from tests.e2e.cluster import TEST_CONFIG
from tests.e2e.test_kubectl import KUBECTL, Kube, task, vcjob

pytestmark = [
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed "
                                               "(scripts/system-deps installs it)"),
    pytest.mark.skipif(not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1"),
]
CONFIG = TEST_CONFIG.replace("[controller]\n",
                             '[controller]\nlisten = "127.0.0.1:0"\ntls = true\n'
                             'volcano_images = "host"\n', 1).replace(
    "cpus = 16\n", "sockets = 2\ncores_per_socket = 1\nthreads_per_core = 1\ngpus = 2\n", 1)
assert "sockets = 2" in CONFIG
SHOW = "grep Cpus_allowed_list /proc/self/status | tr -d ' \\t'"
# the replica's memory policy (its CPUs' NUMA nodes: node 0, this host's only one)
MEMS = "grep -m1 -oE '(bind|prefer):[0-9,-]+' /proc/self/numa_maps || echo unbound"


@pytest.fixture(scope="module")
def pin_kube() -> Iterator[Kube]:
    with kt.kube_cluster("corral-e2e-pin-", CONFIG) as k:
        yield k


def test_single_numa_node_replicas_run_on_their_own_cpus(pin_kube: Kube) -> None:
    kube, c = pin_kube, pin_kube.c
    t = task("w", 2, f"{SHOW}; {MEMS}", cpu=1)
    t["topologyPolicy"] = "single-numa-node"
    kube.apply(vcjob("pinned", t))
    kube.wait_phase("pinned", "Completed")
    jid = int(kube.get("vcjob", "pinned")["metadata"]["annotations"]["corral.dev/job-id"])
    na = c.job(jid)["allocation"]["nodes"][0]
    assert sorted(na["cores"]) == [0, 1] and na["tasks"] == 2
    logs = [kube.run("logs", f"pinned-w-{i}").stdout for i in range(2)]
    # replica k holds the k-th of the entry's cores (one CPU each here)
    assert logs == [f"Cpus_allowed_list:{na['cores'][k]}\nbind:0\n" for k in range(2)], logs
    kube.apply(vcjob("shared", task("w", 2, f"{SHOW}; {MEMS}", cpu=1)))
    kube.wait_phase("shared", "Completed")
    assert [kube.run("logs", f"shared-w-{i}").stdout for i in range(2)] == [
        "Cpus_allowed_list:0-1\nunbound\n"] * 2


def test_single_numa_node_replicas_see_only_their_own_gpus(pin_kube: Kube) -> None:
    kube, c = pin_kube, pin_kube.c
    show = "echo $CUDA_VISIBLE_DEVICES"
    t = task("g", 2, show, cpu=1)
    t["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = 1
    t["topologyPolicy"] = "single-numa-node"
    kube.apply(vcjob("gpus", t))
    kube.wait_phase("gpus", "Completed")
    jid = int(kube.get("vcjob", "gpus")["metadata"]["annotations"]["corral.dev/job-id"])
    na = c.job(jid)["allocation"]["nodes"][0]
    assert sorted(na["gpus"]) == [0, 1]
    logs = [kube.run("logs", f"gpus-g-{i}").stdout for i in range(2)]
    assert logs == [f"{na['gpus'][k]}\n" for k in range(2)], logs
    plain = task("g", 2, show, cpu=1)
    plain["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = 1
    kube.apply(vcjob("gpus2", plain))
    kube.wait_phase("gpus2", "Completed")
    assert [kube.run("logs", f"gpus2-g-{i}").stdout for i in range(2)] == ["0,1\n"] * 2
