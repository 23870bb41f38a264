"""The controller's Prometheus collector over a controller-shaped state (real records)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from corral.controller.records import JobRecord, NodeRecord
from corral.core.model.account import Account, AccountTree, Association
from corral.core.model.job import JobSpec, JobState
from corral.core.model.node import GpuSpec, NodeSpec, NodeState
from corral.core.model.partition import Partition
from corral.ops.collector import register
from corral.submission import JobSubmission


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def job(jid: int, state: JobState, *, part: str | None = None, submit: float = 0.0,
        start: float | None = None, cpus: int = 1, reason: str = "None",
        partitions: tuple[str, ...] = ()) -> JobRecord:
    spec = JobSpec(user="alice", account="physics", partitions=partitions, cpus_per_task=cpus)
    rec = JobRecord(id=jid, sub=JobSubmission(spec=spec), submit_time=submit, state=state,
                    start_time=start, partition=part, reason=reason)
    return rec


def state() -> Any:
    n1 = NodeRecord(spec=NodeSpec("n1", cores_per_socket=8, mem_mb=1000,
                                  gpus=(GpuSpec(0), GpuSpec(1))),
                    state=NodeState.MIXED, connected=True, alloc_cpus=4, alloc_mem_mb=400,
                    alloc_gpus=1, partitions=("batch", "gpu"))
    n2 = NodeRecord(spec=NodeSpec("n2", cores_per_socket=4, mem_mb=500), state=NodeState.DOWN,
                    connected=False, partitions=("batch",))
    parts = (Partition("batch", ("n1", "n2"), is_default=True), Partition("gpu", ("n1",)))
    tree = AccountTree(accounts=(Account("physics", shares=1), Account("chem", shares=1)),
                       associations=(Association("alice", "physics"),))
    return SimpleNamespace(
        pending={}, running={}, jobs={}, usage={("physics", "alice"): 100.0},
        nodes=SimpleNamespace(nodes={"n1": n1, "n2": n2}, partitions=parts),
        cfg=SimpleNamespace(cluster_name="c1", account_tree=lambda: tree),
        metrics=SimpleNamespace(registry=CollectorRegistry()))


def add(ctl: Any, rec: JobRecord) -> None:
    ctl.jobs[rec.id] = rec
    if rec.state is JobState.PENDING:
        ctl.pending[rec.id] = rec
    elif rec.state.is_active:
        ctl.running[rec.id] = rec


def scrape(ctl: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(ctl.metrics.registry).decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def val(m: dict[Any, float], name: str, **labels: str) -> float:
    return m[(name, tuple(sorted(labels.items())))]


def test_jobs_resources_and_fairshare() -> None:
    ctl = state()
    clock = Clock(1000.0)
    col = register(ctl)
    col.clock = clock
    add(ctl, job(1, JobState.PENDING, submit=900.0, cpus=2, reason="Resources"))
    add(ctl, job(2, JobState.PENDING, submit=990.0, cpus=3, reason="Priority",
                 partitions=("gpu",)))
    add(ctl, job(3, JobState.PENDING, submit=950.0, reason="Priority"))
    add(ctl, job(4, JobState.RUNNING, part="gpu", submit=0.0, start=10.0))
    m = scrape(ctl)
    assert val(m, "corral_info", cluster="c1", version=__import__("corral").__version__) == 1
    assert val(m, "corral_jobs_active", state="PENDING", partition="batch") == 2
    assert val(m, "corral_jobs_active", state="PENDING", partition="gpu") == 1
    assert val(m, "corral_jobs_active", state="RUNNING", partition="gpu") == 1
    assert val(m, "corral_jobs_active", state="RUNNING", partition="batch") == 0
    assert val(m, "corral_jobs_pending", partition="batch", reason="Resources") == 1
    assert val(m, "corral_jobs_pending", partition="batch", reason="Priority") == 1
    assert val(m, "corral_pending_cpus", partition="batch") == 3
    assert val(m, "corral_pending_oldest_seconds", partition="batch") == 100
    # batch = n1 (8 CPUs, 4 allocated, usable) + n2 (4 CPUs, down)
    assert val(m, "corral_partition_cpus", partition="batch", status="allocated") == 4
    assert val(m, "corral_partition_cpus", partition="batch", status="idle") == 4
    assert val(m, "corral_partition_cpus", partition="batch", status="other") == 4
    assert val(m, "corral_partition_memory_bytes", partition="gpu", status="idle") == \
        600 * 1024 * 1024
    assert val(m, "corral_partition_gpus", partition="gpu", status="allocated") == 1
    assert val(m, "corral_cluster_cpus", status="other") == 4
    assert val(m, "corral_partition_nodes", partition="batch", state="DOWN") == 1
    assert val(m, "corral_partition_nodes", partition="batch", state="MIXED") == 1
    assert val(m, "corral_account_usage_cpu_seconds", account="physics") == 100
    assert val(m, "corral_account_fairshare", account="chem") == 1.0
    assert val(m, "corral_account_fairshare", account="physics") == pytest.approx(0.25)
    # no job id ever appears as a label value
    assert not any(k[0].startswith("corral_") and ("job_id", "1") in k[1] for k in m)


def test_wait_histogram_counts_each_start_once_and_not_older_ones() -> None:
    ctl = state()
    clock = Clock(1000.0)
    col = register(ctl)
    col.since = 1000.0
    col.clock = clock
    add(ctl, job(1, JobState.RUNNING, part="batch", submit=0.0, start=500.0))  # before
    add(ctl, job(2, JobState.RUNNING, part="batch", submit=1000.0, start=1003.0))
    m = scrape(ctl)
    assert val(m, "corral_job_wait_seconds_count", partition="batch") == 1
    assert val(m, "corral_job_wait_seconds_sum", partition="batch") == 3.0
    assert val(m, "corral_job_wait_seconds_bucket", partition="batch", le="2.5") == 0
    assert val(m, "corral_job_wait_seconds_bucket", partition="batch", le="5.0") == 1
    assert val(m, "corral_partition_jobs_started_total", partition="batch") == 1
    m = scrape(ctl)  # scraped again: not counted twice
    assert val(m, "corral_job_wait_seconds_count", partition="batch") == 1
    # job 2 is requeued and starts again: a new run, counted again
    ctl.jobs[2].restarts = 1
    ctl.jobs[2].start_time = 1100.0
    add(ctl, job(3, JobState.COMPLETED, part="gpu", submit=1000.0, start=1001.0))
    m = scrape(ctl)
    assert val(m, "corral_job_wait_seconds_count", partition="batch") == 2
    assert val(m, "corral_partition_jobs_started_total", partition="gpu") == 1
    assert len(col._seen) == 2  # forgotten as soon as the records leave memory
