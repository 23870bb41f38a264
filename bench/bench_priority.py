"""Benchmark of ``corral.core.priority.compute``: the per-cycle priority pass.

Synthetic queue on a 1,000-node cluster (2 x 32 cores): 5 departments, 20 groups, 200
users with usage, 5% of jobs with dependencies, 5% with begin times, a mix of partitions,
QOS, nice and sizes. Times are the best of N runs; the reference is sorting the same
pending tuple by (submit_time, id) in the same run, so the ratio travels across machines.

Run: ``.venv/bin/python bench/bench_priority.py`` (writes bench/results/priority.md).
"""

from __future__ import annotations

import functools
import platform
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

from corral.core.config import FairshareAlgorithm, Ordering, SchedulerConfig
from corral.core.model import (
    Account,
    AccountTree,
    Association,
    Job,
    JobSpec,
    Node,
    NodeSpec,
    Partition,
    Qos,
)
from corral.core.model.job import Dependency, DependencyKind, DependencySpec
from corral.core.priority import compute
from corral.core.priority.multifactor import clear_memo
from corral.core.snapshot import ClusterSnapshot

RESULTS = Path(__file__).parent / "results" / "priority.md"


def build(n_jobs: int, n_nodes: int = 1000, seed: int = 1) -> ClusterSnapshot:
    rng = random.Random(seed)
    nodes = tuple(
        Node(NodeSpec(f"n{i:04d}", sockets=2, cores_per_socket=32, mem_mb=512000))
        for i in range(n_nodes)
    )
    parts = (
        Partition("batch", tuple(n.name for n in nodes), is_default=True),
        Partition("gpu", tuple(n.name for n in nodes[: n_nodes // 4]), priority_job_factor=10),
    )
    qos = (Qos("normal", 0), Qos("high", 100), Qos("low", 10))
    accounts = [Account(f"dept{d}", "root", shares=rng.randint(1, 10)) for d in range(5)]
    accounts += [Account(f"grp{g}", f"dept{g % 5}", shares=rng.randint(1, 10)) for g in range(20)]
    assocs = [
        Association(f"u{u}", f"grp{u % 20}", shares=rng.randint(1, 5), is_default=True)
        for u in range(200)
    ]
    usage = {(f"grp{u % 20}", f"u{u}"): rng.random() * 1e7 for u in range(200)}
    pending = []
    for i in range(n_jobs):
        dep = None
        if rng.random() < 0.05:
            dep = DependencySpec((Dependency(DependencyKind.AFTEROK, (rng.randrange(1, n_jobs),)),))
        spec = JobSpec(
            name=f"j{i}", user=f"u{rng.randrange(210)}",
            nodes_min=rng.choice([1, 1, 1, 2, 4, 8, 16, 64]),
            ntasks=rng.choice([None, 1, 4, 32]),
            partitions=rng.choice([(), ("batch",), ("gpu",), ("batch", "gpu")]),
            qos=rng.choice([None, "high", "low"]),
            time_limit_s=rng.choice([None, 600, 3600, 2 * 86400]),
            nice=rng.choice([0, 0, 0, 100]), dependency=dep,
            begin_time=rng.random() * 2e6 if rng.random() < 0.05 else None,
        )
        pending.append(Job(i + 1, spec, submit_time=rng.random() * 1e6))
    return ClusterSnapshot(nodes=nodes, partitions=parts, qos=qos,
                           accounts=AccountTree(tuple(accounts), tuple(assocs)),
                           pending=tuple(pending), usage=usage)


def _fcfs_key(j: Job) -> tuple[float, int]:
    return (j.submit_time, j.id)


def _cold(snap: ClusterSnapshot, cfg: SchedulerConfig, now: float) -> object:
    clear_memo()
    return compute(snap, cfg, now)


def best_ms(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1000


CONFIGS = [
    ("multifactor + Fair Tree", SchedulerConfig()),
    ("multifactor + classic", SchedulerConfig(fairshare=FairshareAlgorithm.CLASSIC)),
    ("F1", SchedulerConfig(ordering=Ordering.F1)),
    ("WFP3", SchedulerConfig(ordering=Ordering.WFP3)),
]


def main() -> None:
    now = 1.5e6
    lines = [
        "# Priority pass benchmark (`bench/bench_priority.py`)",
        "",
        f"Python {sys.version.split()[0]} on {platform.machine()}; 1,000 nodes x 64 cores, "
        "200 users in a 3-level account tree; best of N runs.",
        "Reference: `sorted(pending, key=(submit_time, id))` of the same queue, same run.",
        "",
        "cold: fair share recomputed (usage or tree changed since the last call); warm: same",
        "usage and tree as the previous call (memoized fair share, e.g. between decay steps).",
        "",
        "| pending jobs | ordering | cold ms | warm ms | cold x reference sort |",
        "|---:|---|---:|---:|---:|",
    ]
    for n in (100, 2500, 5000, 10000, 20000):
        snap = build(n)
        repeat = 200 if n <= 100 else 15
        ref = best_ms(functools.partial(sorted, snap.pending, key=_fcfs_key), repeat)
        for label, cfg in CONFIGS:
            warm = best_ms(functools.partial(compute, snap, cfg, now), repeat)
            cold = best_ms(functools.partial(_cold, snap, cfg, now), repeat)
            lines.append(
                f"| {n:,} | {label} | {cold:.2f} | {warm:.2f} | {cold / ref:.1f} |"
            )
            print(lines[-1], flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
