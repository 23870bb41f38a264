"""Benchmark: one full scheduling cycle of ``run_cycle`` (priority, backfill, placement).

Scenario (issue 2), built deterministically from a seed: 1,000 nodes (2 sockets x 32 cores,
512 GB, 4 GPUs on a quarter of them, 32 leaf switches), 3,000 running jobs and 10,000
pending jobs (1-64 nodes, partial-node jobs, GPU jobs, arrays, time limits from minutes to
days), multifactor priority with fair share over 10 accounts and 60 users. The same
scenario is scaled to 1/4, 1/2, 1 and 2x (nodes, running and pending together).

Each configuration is timed ``--runs`` times; "warm" runs reuse the core's cross-cycle memos
(node table, compiled allocations, shapes, priority caches), as a controller or simulator
calling it again would; "cold" runs clear them first. Medians go to
``bench/results/core_cycle.json`` and ``bench/results/core_cycle.md``.

A deep-queue point (issue 19: 1,000 nodes, 3,000 running, **100,000 pending**, the same
mix) follows the scaled rows, EASY only; with ``--baseline DIR`` (a ``git archive`` of
an earlier commit) the same point is timed in DIR's code too, in a child process
(``PYTHONPATH=DIR/src``), interleaved with this tree's, as the reference of the same run.

    .venv/bin/python bench/core_cycle.py            # full table (a few minutes)
    .venv/bin/python bench/core_cycle.py --quick    # 1x only, EASY only
    .venv/bin/python bench/core_cycle.py --deep-only --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from corral.core import run_cycle
from corral.core.config import BackfillMode, SchedulerConfig
from corral.core.cycle import clear_caches
from corral.core.model.account import Account, AccountTree, Association
from corral.core.model.job import Job, JobSpec, JobState
from corral.core.model.node import GpuSpec, Node, NodeSpec, NodeState
from corral.core.model.partition import Partition
from corral.core.snapshot import ClusterSnapshot

HOURS = 3600
LIMITS_S = [10 * 60, 30 * 60, HOURS, 2 * HOURS, 4 * HOURS, 12 * HOURS, 24 * HOURS,
            48 * HOURS, 72 * HOURS]
LIMIT_W = [10, 10, 20, 15, 15, 10, 10, 6, 4]
NOW = 1_000_000.0


def make_nodes(n: int) -> tuple[Node, ...]:
    switches = 32 * n // 1000 or 1
    per = -(-n // switches)
    out = []
    for k in range(n):
        gpus = tuple(GpuSpec(g, "a100", 81920, numa=g // 2) for g in range(4)) if k % 4 == 0 else ()
        spec = NodeSpec(f"c{k:05d}", 2, 32, 1, 512 * 1024, gpus,
                        features=frozenset({"avx512", "ib"}), switch=f"sw{k // per:02d}")
        out.append(Node(spec, NodeState.IDLE))
    return tuple(out)


def job_spec(rng: random.Random, users: list[tuple[str, str]]) -> JobSpec:
    user, account = rng.choice(users)
    limit = rng.choices(LIMITS_S, LIMIT_W)[0]
    r = rng.random()
    if r < 0.15:  # GPU job: 1-4 nodes, 1-4 GPUs each
        return JobSpec(user=user, account=account, partitions=("gpu",),
                       nodes_min=rng.choice([1, 1, 1, 2, 4]),
                       gpus_per_node=rng.choice([1, 2, 4]), ntasks_per_node=1,
                       cpus_per_task=rng.choice([4, 8, 16]), time_limit_s=limit)
    if r < 0.55:  # partial node
        return JobSpec(user=user, account=account, cpus_per_task=rng.choice([1, 2, 4, 8, 16]),
                       ntasks_per_node=rng.choice([1, 1, 2]), time_limit_s=limit)
    if r < 0.65:  # flexible task count (-n)
        ntasks = rng.choice([16, 32, 64, 96, 128])
        return JobSpec(user=user, account=account, ntasks=ntasks, nodes_max=ntasks,
                       time_limit_s=limit)
    nodes = rng.choices([1, 2, 4, 8, 16, 32, 64], [25, 20, 20, 15, 10, 6, 4])[0]
    return JobSpec(user=user, account=account, nodes_min=nodes, exclusive=rng.random() < 0.5,
                   ntasks_per_node=64 if rng.random() < 0.5 else 32, time_limit_s=limit)


def running_spec(rng: random.Random, users: list[tuple[str, str]]) -> JobSpec:
    """The running mix: mostly partial-node jobs (about 70% of the cores end up busy)."""
    user, account = rng.choice(users)
    limit = rng.choices(LIMITS_S, LIMIT_W)[0]
    r = rng.random()
    if r < 0.80:
        return JobSpec(user=user, account=account, cpus_per_task=rng.choice([1, 2, 4, 8, 16]),
                       ntasks_per_node=rng.choice([1, 1, 2]), time_limit_s=limit)
    if r < 0.90:
        return JobSpec(user=user, account=account, partitions=("gpu",),
                       gpus_per_node=rng.choice([1, 2]), cpus_per_task=rng.choice([4, 8, 16]),
                       time_limit_s=limit)
    if r < 0.97:
        return JobSpec(user=user, account=account, ntasks_per_node=32, time_limit_s=limit)
    return JobSpec(user=user, account=account, nodes_min=rng.choice([2, 3, 4]), exclusive=True,
                   time_limit_s=limit)


def scenario(scale: float, seed: int = 1, pending: int | None = None) -> ClusterSnapshot:
    """The scenario at ``scale``; ``pending``: that many pending jobs instead of
    10,000 x scale (the deep-queue point)."""
    rng = random.Random(seed)
    n_nodes = int(1000 * scale)
    n_running = int(3000 * scale)
    n_pending = int(10_000 * scale) if pending is None else pending
    nodes = make_nodes(n_nodes)
    names = tuple(n.spec.name for n in nodes)
    parts = (Partition("batch", names, is_default=True, max_time_s=7 * 24 * HOURS),
             Partition("gpu", tuple(n.spec.name for n in nodes if n.spec.gpus),
                       max_time_s=7 * 24 * HOURS))
    accounts = [Account(f"acct{a}", "root", rng.randint(1, 10)) for a in range(10)]
    users = [(f"user{u}", f"acct{u % 10}") for u in range(60)]
    tree = AccountTree(tuple(accounts), tuple(Association(u, a, 1) for u, a in users))
    # running jobs: fill the cluster with the same mix, scheduled by the core itself
    pool_jobs = []
    jid = 1
    while len(pool_jobs) < n_running * 2:
        pool_jobs.append(Job(jid, running_spec(rng, users), NOW - rng.uniform(0, 3 * 86400)))
        jid += 1
    snap = ClusterSnapshot(nodes, parts, accounts=tree, pending=tuple(pool_jobs))
    fill = SchedulerConfig(backfill=BackfillMode.EASY, bf_max_job_test=10**9)
    running: list[Job] = []
    by_id = {j.id: j for j in pool_jobs}
    for s in run_cycle(replace(snap, pending=tuple(pool_jobs)), fill, NOW).starts:
        if len(running) >= n_running:
            break
        j = by_id[s.job_id]
        start = NOW - rng.uniform(0, s.time_limit_s or 3600)
        running.append(replace(j, state=JobState.RUNNING, start_time=start,
                               allocation=s.allocation, partition=s.allocation.partition,
                               time_limit_s=s.time_limit_s))
    pending: list[Job] = []
    while len(pending) < n_pending:
        spec = job_spec(rng, users)
        submit = NOW - rng.uniform(0, 2 * 86400)
        if rng.random() < 0.05:  # an array of 10-50 tasks sharing one spec
            size = rng.randint(10, 50)
            for t in range(size):
                pending.append(Job(jid, spec, submit, array_job_id=jid - t, array_task_id=t,
                                   array_max_running=rng.choice([None, 10])))
                jid += 1
        else:
            pending.append(Job(jid, spec, submit))
            jid += 1
    usage = {(a, u): rng.uniform(0, 1e7) for u, a in users}
    return ClusterSnapshot(nodes, parts, accounts=tree, pending=tuple(pending[:n_pending]),
                           running=tuple(running), usage=usage)


def time_cycle(snap: ClusterSnapshot, config: SchedulerConfig, runs: int,
               cold: bool) -> tuple[float, float, dict[str, int]]:
    """Median CPU seconds and median wall seconds of ``runs`` cycles, and the last stats.

    CPU time (``process_time``) is the headline: this machine's two cores are shared, and
    wall time then counts other processes; on an idle machine the two agree."""
    cpu = []
    wall = []
    stats: dict[str, int] = {}
    for _ in range(runs):
        if cold:
            clear_caches()
        gc.collect()
        c0 = time.process_time()
        t0 = time.perf_counter()
        r = run_cycle(snap, config, NOW)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        s = r.stats
        stats = {"started": s.started, "backfilled": s.backfilled, "reserved": s.reserved,
                 "tested": s.jobs_tested, "pending": s.pending, "running": s.running}
    return statistics.median(cpu), statistics.median(wall), stats


DEEP_PENDING = 100_000


def deep_point(runs: int) -> dict[str, object]:
    """The deep-queue point in the code this process imports (EASY, warm and cold)."""
    t0 = time.perf_counter()
    snap = scenario(1.0, pending=DEEP_PENDING)
    build_s = time.perf_counter() - t0
    cfg = SchedulerConfig(backfill=BackfillMode.EASY)
    cold, cold_wall, _ = time_cycle(snap, cfg, 1, cold=True)
    warm, warm_wall, stats = time_cycle(snap, cfg, runs, cold=False)
    return {"scale": 1.0, "nodes": len(snap.nodes), "running": len(snap.running),
            "pending": len(snap.pending), "mode": "easy", "warm_s": round(warm, 4),
            "cold_s": round(cold, 4), "warm_wall_s": round(warm_wall, 4),
            "cold_wall_s": round(cold_wall, 4), "build_s": round(build_s, 1), **stats}


def baseline_point(src: Path, runs: int) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(src / "src"))
    out = subprocess.run([sys.executable, __file__, "--point-json", "--runs", str(runs)],
                         env=env, capture_output=True, text=True, check=True).stdout
    got: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return got


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1x scale, EASY only")
    ap.add_argument("--deep-only", action="store_true",
                    help="only the 100,000-pending point (writes core_cycle_deep.*)")
    ap.add_argument("--baseline", type=Path, help="time the deep point in DIR/src too")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved deep-point rounds")
    ap.add_argument("--point-json", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    if args.point_json:  # a child timing the deep point in the code on its PYTHONPATH
        print(json.dumps(deep_point(args.runs)))
        return 0
    scales = [] if args.deep_only else [1.0] if args.quick else [0.25, 0.5, 1.0, 2.0]
    modes = [BackfillMode.EASY] if args.quick else [BackfillMode.EASY,
                                                    BackfillMode.CONSERVATIVE]
    rows = []
    for scale in scales:
        t0 = time.perf_counter()
        snap = scenario(scale)
        build_s = time.perf_counter() - t0
        for mode in modes:
            cfg = SchedulerConfig(backfill=mode)
            warm, warm_wall, stats = time_cycle(snap, cfg, args.runs, cold=False)
            cold, cold_wall, _ = time_cycle(snap, cfg, max(1, args.runs // 2), cold=True)
            row = {"scale": scale, "nodes": len(snap.nodes), "running": len(snap.running),
                   "pending": len(snap.pending), "mode": mode.value, "warm_s": round(warm, 4),
                   "cold_s": round(cold, 4), "warm_wall_s": round(warm_wall, 4),
                   "cold_wall_s": round(cold_wall, 4), **stats}
            rows.append(row)
            print(f"x{scale:<4} {mode.value:12} nodes={row['nodes']:5} "
                  f"running={row['running']:5} pending={row['pending']:6} "
                  f"warm={warm * 1000:8.1f} ms (wall {warm_wall * 1000:.1f}) "
                  f"cold={cold * 1000:8.1f} ms (wall {cold_wall * 1000:.1f}) {stats} "
                  f"(scenario built in {build_s:.1f}s)", flush=True)
    deep: list[dict[str, object]] = []
    base: list[dict[str, object]] = []
    if not args.quick:  # each in a fresh child, interleaved with the baseline's
        here = Path(__file__).resolve().parent.parent
        for _ in range(args.rounds):
            deep.append(baseline_point(here, args.runs))
            print("deep, this tree:", deep[-1], flush=True)
            if args.baseline:
                base.append(baseline_point(args.baseline, args.runs))
                print("deep, baseline:", base[-1], flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"python": sys.version.split()[0], "machine": platform.machine(),
            "runs": args.runs, "target_s": 0.5, "load_avg": os.getloadavg(),
            "measured": time.strftime("%Y-%m-%d %H:%M:%S"),
            "baseline": str(args.baseline) if args.baseline else None}
    if deep:
        rows.append(_median_row(deep))
    if base:
        rows.append({**_median_row(base), "mode": "easy (baseline)"})
    if not args.quick:
        name = "core_cycle_deep" if args.deep_only else "core_cycle"
        (out / f"{name}.json").write_text(json.dumps(
            {"meta": meta, "rows": rows, "deep_rounds": deep, "baseline_rounds": base},
            indent=2) + "\n")
        lines = ["# Scheduling cycle benchmark (`bench/core_cycle.py`)", "",
                 "One full `run_cycle` (multifactor priority + backfill + placement); median "
                 f"CPU time of {args.runs} warm runs (memos kept, as in a running controller) "
                 "and of cold runs (memos cleared); wall time in parentheses (the 2-core "
                 "machine is shared, so wall time includes other processes). Target at 1x "
                 "with EASY: < 0.5 s. The 100,000-pending rows: median over "
                 f"{args.rounds} interleaved child processes (one cold run, then the warm "
                 "runs); 'baseline' is the code of `--baseline` timed in the same run. "
                 f"Measured {meta['measured']}, load average {meta['load_avg']}.", "",
                 "| scale | nodes | running | pending | backfill | warm ms (wall) | "
                 "cold ms (wall) | started | backfilled | tested |",
                 "|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r['scale']}x | {r['nodes']} | {r['running']} | {r['pending']} | "
                         f"{r['mode']} | {float(r['warm_s']) * 1000:.0f} "
                         f"({float(r['warm_wall_s']) * 1000:.0f})"
                         f" | {float(r['cold_s']) * 1000:.0f} "
                         f"({float(r['cold_wall_s']) * 1000:.0f}) | "
                         f"{r['started']} | {r['backfilled']} | {r['tested']} |")
        (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    return 0


def _median_row(points: list[dict[str, object]]) -> dict[str, object]:
    row = dict(points[0])
    for key in ("warm_s", "cold_s", "warm_wall_s", "cold_wall_s"):
        row[key] = statistics.median(float(str(p[key])) for p in points)
    return row


if __name__ == "__main__":
    raise SystemExit(main())
