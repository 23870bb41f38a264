"""A task's topologyPolicy through the real kubectl and a running cluster (issue 14):
``single-numa-node`` replicas each get one NUMA domain of their node and wait, with a
TopologyAffinityError reason, while no domain has room; ``restricted`` replicas get the
fewest domains that hold them; a replica larger than every domain is refused at apply.

The node is configured as 4 sockets of 4 cores (one NUMA domain per socket: cores
``4k .. 4k+3`` form domain ``k``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import tests.e2e.test_kubectl as kt
from tests.e2e.cluster import TEST_CONFIG, wait_for
from tests.e2e.test_kubectl import KUBECTL, Kube, task, vcjob

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed "
                                                         "(scripts/system-deps installs it)")
CONFIG = TEST_CONFIG.replace("[controller]\n",
                             '[controller]\nlisten = "127.0.0.1:0"\ntls = true\n'
                             'volcano_images = "host"\n', 1).replace(
    "cpus = 16\n", "sockets = 4\ncores_per_socket = 4\nthreads_per_core = 1\n", 1)
assert "sockets = 4" in CONFIG


@pytest.fixture(scope="module")
def numa_kube() -> Iterator[Kube]:
    with kt.kube_cluster("corral-e2e-numa-", CONFIG) as k:
        yield k


def _replica_domains(job: dict[str, Any], cpus: int) -> list[set[int]]:
    """The NUMA domains (core // 4) of each replica of the job's allocation: task ``k``
    of an entry holds its ``k``-th run of ``cpus`` cores."""
    out = []
    for na in job["allocation"]["nodes"]:
        cores = na["cores"]
        assert len(cores) == na["tasks"] * cpus and len(set(cores)) == len(cores)
        for k in range(na["tasks"]):
            out.append({c // 4 for c in cores[k * cpus:(k + 1) * cpus]})
    return out


def ntask(name: str, replicas: int, command: str, cpu: int,
          policy: str | None = None) -> dict[str, Any]:
    t = task(name, replicas, command, cpu=cpu)
    if policy is not None:
        t["topologyPolicy"] = policy
    return t


def _job_id(kube: Kube, name: str) -> int:
    return int(kube.get("vcjob", name)["metadata"]["annotations"]["corral.dev/job-id"])


def test_single_numa_node_replicas_wait_for_a_whole_domain_then_get_one(
        numa_kube: Kube) -> None:
    kube, c = numa_kube, numa_kube.c
    blocker = c.submit("sleep 120", cpus_per_task=2)  # 2 cores of one domain
    c.wait_state(blocker, "RUNNING")
    try:
        # 14 cores are free, but only 3 domains have 3 free cores: 4 replicas of 3 wait
        kube.apply(vcjob("numa", ntask("w", 4, "echo $VC_TASK_INDEX", 3,
                                       "single-numa-node"), plugins={"env": []}))
        jid = _job_id(kube, "numa")
        got = wait_for(lambda: (lambda j: j if j["reason_detail"] else None)(c.job(jid)),
                       what="a pending reason")
        assert got["state"] == "PENDING" and got["reason"] == "Resources"
        assert "TopologyAffinityError" in got["reason_detail"], got["reason_detail"]
        assert "single-numa-node" in got["reason_detail"]
        state = kube.get("vcjob", "numa")["status"]["state"]
        assert state["phase"] == "Pending" and "TopologyAffinityError" in state["message"]
        # the same shape without the policy starts at once on the 14 free cores (its
        # time limit below the blocker's lets it backfill before the first one's start)
        kube.apply(vcjob("loose", task("w", 4, "true", cpu=3, activeDeadlineSeconds=30)))
        kube.wait_phase("loose", "Completed")
        assert c.job(jid)["state"] == "PENDING"
    finally:
        c.client.cancel([blocker])
    kube.wait_phase("numa", "Completed")
    job = c.job(jid)
    domains = _replica_domains(job, 3)
    assert len(domains) == 4 and all(len(d) == 1 for d in domains), domains
    assert sorted(d.pop() for d in domains) == [0, 1, 2, 3]
    logs = sorted(kube.run("logs", f"numa-w-{i}").stdout for i in range(4))
    assert logs == ["0\n", "1\n", "2\n", "3\n"]


def test_restricted_replicas_get_the_fewest_domains_that_hold_them(numa_kube: Kube) -> None:
    kube, c = numa_kube, numa_kube.c
    blocker = c.submit("sleep 120", cpus_per_task=2)
    c.wait_state(blocker, "RUNNING")
    try:
        # 6 cores on 4-core domains: 2 domains each, never 3 (free now: 2, 4, 4, 4)
        kube.apply(vcjob("tight", ntask("w", 2, "true", 6, "restricted")))
        kube.wait_phase("tight", "Completed")
    finally:
        c.client.cancel([blocker])
    domains = _replica_domains(c.job(_job_id(kube, "tight")), 6)
    assert [len(d) for d in domains] == [2, 2], domains


def test_a_replica_larger_than_every_domain_is_refused_at_apply(numa_kube: Kube) -> None:
    kube = numa_kube
    r = kube.apply(vcjob("huge", ntask("w", 1, "true", 5)))
    assert "created" in r.stdout  # without a policy 5 cores fit the node
    kube.wait_phase("huge", "Completed")
    r = kube.apply(vcjob("huge2", ntask("w", 1, "true", 5, "single-numa-node")),
                   ok=False)
    assert r.returncode == 1, r.stdout
    assert "5 CPUs per replica from one NUMA domain" in r.stderr, r.stderr
    assert "largest NUMA domain" in r.stderr and "has 4 CPUs" in r.stderr, r.stderr
    assert "NotFound" in kube.run("get", "vcjob", "huge2", ok=False).stderr


def test_a_native_job_of_task_groups_takes_the_policy_through_the_api(
        numa_kube: Kube) -> None:
    from corral.client import CorralError
    from corral.core.model.job import TaskGroup

    c = numa_kube.c
    jid = c.submit("true", task_groups=(
        TaskGroup("w", 4, 3, numa_policy="single-numa-node"),))
    job = c.wait_done(jid)
    assert job["state"] == "COMPLETED", job
    assert sorted(d.pop() for d in _replica_domains(job, 3)) == [0, 1, 2, 3]
    with pytest.raises(CorralError, match="largest NUMA domain") as err:
        c.submit("true", task_groups=(TaskGroup("w", 1, 5, numa_policy="single-numa-node"),))
    assert "5 CPUs per replica" in str(err.value)
