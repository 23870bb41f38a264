#!/usr/bin/env python3
"""Simulator speed: Corral vs AccaSim 1.1.3 on the same trace, in the same run.

What it does (see ``shared/bench/accasim/README.md`` for AccaSim on this machine):

1. Makes sure AccaSim is installed in a throw-away Python 3.9 venv under /tmp
   (``accasim==1.1.3`` from PyPI; nothing of AccaSim enters this repository).
2. Replays the HPC2N trace (all 202,871 jobs unless ``--jobs N``) with EASY backfill in
   AccaSim (``accasim_bench.py``, first-fit allocator) and in Corral
   (``corral sim run --policy fcfs+easy``), each in its own process under
   ``/usr/bin/time -v`` for the peak RSS. Both replay jobs for their logged run time
   (AccaSim never kills at the estimate, so Corral runs with ``--exceed run`` here).
3. Replays RICC (447,794 jobs, the largest trace) in Corral for peak memory.
4. Writes ``bench/results/sim_speed.json`` and ``.md``: both times, the ratio, peak RSS.

Times: AccaSim's own ``simulate_wall_s`` (its simulation loop, which also reads the
trace) against Corral's engine wall time (the simulation loop, trace already parsed), and
both processes' total wall time (interpreter start, imports, parsing, output).

Usage: ``.venv/bin/python bench/sim_speed.py [--jobs N] [--repeat R] [--skip-ricc]``
(R interleaved rounds of AccaSim and Corral on HPC2N, 3 by default; medians reported)
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("CORRAL_SHARED", ROOT.parent / "shared"))
TRACES = SHARED / "traces"
ACCASIM_BENCH = SHARED / "bench" / "accasim" / "accasim_bench.py"
VENV = Path("/tmp/accasim-venv")
RESULTS = ROOT / "bench" / "results"
CORRAL = ROOT / ".venv" / "bin" / "corral"


def ensure_accasim() -> Path:
    py = VENV / "bin" / "python"
    if py.exists():
        ok = subprocess.run([str(py), "-c", "import accasim"], capture_output=True)
        if ok.returncode == 0:
            return py
    candidates = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python")))
    if not candidates:
        sys.exit("AccaSim needs Python 3.9 (none found under ~/.pyenv/versions)")
    subprocess.run([candidates[0], "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(VENV / "bin" / "pip"), "install", "-q", "accasim==1.1.3"], check=True)
    return py


def timed(cmd: list[str], cwd: Path | None = None) -> tuple[str, float, float]:
    """Run under /usr/bin/time -v: (stdout, wall seconds, peak RSS MiB)."""
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True,
                       cwd=cwd)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    rss = int(m.group(1)) / 1024 if m else float("nan")
    return p.stdout, wall, rss


def run_accasim(py: Path, trace: Path, jobs: int) -> dict[str, Any]:
    out, wall, rss = timed([str(py), str(ACCASIM_BENCH), "--trace", str(trace),
                            "--jobs", str(jobs), "--dispatcher", "easy"])
    line = [ln for ln in out.splitlines() if ln.startswith("{")][-1]
    data: dict[str, Any] = json.loads(line)
    data["process_wall_s"] = round(wall, 2)
    data["peak_rss_mib"] = round(rss, 1)
    return data


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median simulation time (the lower middle one of an even count)."""
    ordered = sorted(runs, key=lambda r: r["simulate_wall_s"])
    return ordered[(len(ordered) - 1) // 2]


def run_corral(trace: Path, jobs: int, exceed: str, policy: str = "fcfs+easy",
               ) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out_json = Path(tmp) / "m.json"
        cmd = [str(CORRAL), "sim", "run", str(trace), "--policy", policy, "--exceed", exceed,
               "--json", str(out_json), "--quiet"]
        if jobs:
            cmd += ["--jobs", str(jobs)]
        _, wall, rss = timed(cmd)
        summary = json.loads(out_json.read_text())
    return {
        "trace": trace.name, "policy": policy, "exceed": exceed,
        "jobs": summary["jobs"]["total"], "started": summary["jobs"]["started"],
        "simulate_wall_s": summary["stats"]["wall_s"], "core_s": summary["stats"]["core_s"],
        "cycles": summary["stats"]["cycles"], "cycles_skipped": summary["stats"]["cycles_skipped"],
        "process_wall_s": round(wall, 2), "peak_rss_mib": round(rss, 1),
        "mean_wait_s": summary["wait_s"]["mean"], "mean_bsld": summary["bsld"]["mean"],
        "utilization": summary["utilization"]["makespan"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=0, help="first N jobs of HPC2N (0 = all)")
    ap.add_argument("--skip-ricc", action="store_true", help="skip the RICC memory run")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--ricc-json", type=Path, default=None,
                    help="reuse a RICC result (the JSON line this script printed) instead "
                         "of replaying RICC again")
    ap.add_argument("--repeat", type=int, default=3,
                    help="rounds of AccaSim and Corral on HPC2N, interleaved (medians)")
    ap.add_argument("--render-only", action="store_true",
                    help="rewrite sim_speed.md from the recorded sim_speed.json (no runs)")
    args = ap.parse_args()
    if args.render_only:
        write_markdown(json.loads((RESULTS / "sim_speed.json").read_text()))
        return

    hpc2n = TRACES / "HPC2N-2002-2.2-cln.swf.gz"
    ricc = TRACES / "RICC-2010-2.swf.gz"
    py = ensure_accasim()
    accs: list[dict[str, Any]] = []
    cors: list[dict[str, Any]] = []
    kills: list[dict[str, Any]] = []
    for k in range(args.repeat):  # interleaved, so both see the same spells of load
        print(f"round {k + 1}/{args.repeat}: AccaSim on HPC2N ...", flush=True)
        accs.append(run_accasim(py, hpc2n, args.jobs))
        print(json.dumps(accs[-1]), flush=True)
        print(f"round {k + 1}/{args.repeat}: Corral on HPC2N ...", flush=True)
        cors.append(run_corral(hpc2n, args.jobs, "run"))
        print(json.dumps(cors[-1]), flush=True)
        kills.append(run_corral(hpc2n, args.jobs, "kill"))
        print(json.dumps(kills[-1]), flush=True)
    acc, cor, cor_kill = _median_run(accs), _median_run(cors), _median_run(kills)
    big = None
    if args.ricc_json is not None:
        big = json.loads(args.ricc_json.read_text())
        big.setdefault("reused_from", str(args.ricc_json))
    elif not args.skip_ricc:
        print("Corral on RICC ...", flush=True)
        big = run_corral(ricc, 0, "kill")
        print(json.dumps(big), flush=True)

    ratio_sim = acc["simulate_wall_s"] / cor["simulate_wall_s"]
    ratio_proc = acc["process_wall_s"] / cor["process_wall_s"]
    result = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "hpc2n_jobs": args.jobs or "all",
        "accasim": acc, "corral": cor, "corral_kill_at_limit": cor_kill, "corral_ricc": big,
        "rounds": {"accasim_s": [a["simulate_wall_s"] for a in accs],
                   "corral_s": [c["simulate_wall_s"] for c in cors],
                   "corral_kill_s": [c["simulate_wall_s"] for c in kills]},
        "speedup_simulate": round(ratio_sim, 2), "speedup_process": round(ratio_proc, 2),
        "target": "Corral >= 10x faster than AccaSim (EASY, full HPC2N); RICC peak < 500 MB",
    }
    print(json.dumps({k: result[k] for k in ("speedup_simulate", "speedup_process")}))
    if args.no_write:
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "sim_speed.json").write_text(json.dumps(result, indent=1) + "\n")
    write_markdown(result)


def _rounds_text(rounds: dict[str, list[float]] | None) -> str:
    if not rounds or len(rounds["accasim_s"]) < 2:
        return ""
    acc, cor = rounds["accasim_s"], rounds["corral_s"]
    pairs = ", ".join(f"{a:.1f}/{c:.2f} s = {a / c:.2f}x" for a, c in zip(acc, cor, strict=True))
    return (f" {len(acc)} interleaved rounds (AccaSim/Corral: {pairs}); the table shows the "
            "median run of each, and the speed-up is the ratio of the medians.")


def write_markdown(result: dict[str, Any]) -> None:
    """``bench/results/sim_speed.md`` from one recorded result (``sim_speed.json``)."""
    acc, cor, cor_kill = result["accasim"], result["corral"], result["corral_kill_at_limit"]
    big = result.get("corral_ricc")
    ratio_sim = acc["simulate_wall_s"] / cor["simulate_wall_s"]
    ratio_proc = acc["process_wall_s"] / cor["process_wall_s"]
    cpus = result["machine"]["cpus"]
    md = [
        "# Simulator speed: Corral vs AccaSim 1.1.3",
        "",
        f"Measured {result['when']} on this machine ({cpus} CPUs), same run, "
        f"HPC2N-2002-2.2-cln ({cor['jobs']:,} jobs, 240 processors), EASY backfill, jobs run "
        "their logged time. Command: `.venv/bin/python bench/sim_speed.py`."
        + _rounds_text(result.get("rounds")),
        "",
        "| simulator | simulate wall | process wall | peak RSS |",
        "|---|---|---|---|",
        f"| AccaSim 1.1.3 (EASY, first fit) | {acc['simulate_wall_s']:.1f} s | "
        f"{acc['process_wall_s']:.1f} s | {acc['peak_rss_mib']:.0f} MiB |",
        f"| Corral (`fcfs+easy`, `--exceed run`) | {cor['simulate_wall_s']:.1f} s | "
        f"{cor['process_wall_s']:.1f} s | {cor['peak_rss_mib']:.0f} MiB |",
        f"| Corral (`fcfs+easy`, kill at limit) | {cor_kill['simulate_wall_s']:.1f} s | "
        f"{cor_kill['process_wall_s']:.1f} s | {cor_kill['peak_rss_mib']:.0f} MiB |",
        "",
        f"Speed-up: **{ratio_sim:.1f}x** (simulation loops), {ratio_proc:.1f}x (whole "
        "processes). Corral ran "
        f"{cor['cycles']:,} scheduling cycles through `corral.core.run_cycle` and skipped "
        f"{cor['cycles_skipped']:,} that provably could start nothing; "
        f"{cor['core_s']:.1f} s of its time was inside the core.",
    ]
    md += ["", f"Target: at least 10x: {'met' if ratio_sim >= 10 else 'not met'} in this run. "
               f"{cor['core_s'] / cor['simulate_wall_s']:.0%} of Corral's simulation time is "
               "spent inside the scheduling core (`run_cycle`), the same code the controller "
               "runs; the engine around it is the rest."]
    md += ["", "Before this round of work (2026-11-30 02:52, same machine): AccaSim 143.6 s, "
               "Corral 58.7 s (2.4x); RICC 4202 s. What changed, all with byte-identical "
               "decisions (per-job CSV and metrics JSON of the full HPC2N replay and of six "
               "30,000-job policy checks compared before/after): equal requests share one "
               "`JobSpec` (plans memoized), the simulator keeps the core's pool across cycles "
               "(`corral.core.pool.PoolKeeper`, `run_cycle(..., keeper=)`), one-core nodes "
               "are taken and given back in one batch, EASY's count test runs before a "
               "placement is built, and behind a reserved head the queue is narrowed and the "
               "jobs that would only be refused are counted at C level "
               "(`Pass._fitting`/`_lean_run`)."]
    md += ["", "Then (2026-11-30 04:21): AccaSim 115.5 s, Corral 17.7 s (6.5x). Since: a "
               "one-core placement is chosen and taken in one step (`Placer.unit_take`, no "
               "per-node picks built) also before any reservation exists, and what a pass "
               "reads from the node table, config and QOS/account records (placer, disabled "
               "limits, QOS map, partition tiers) is kept across cycles; decisions "
               "byte-identical (the same seven checks). Interleaved on this machine, first "
               "30,000 HPC2N jobs: 2.43 s -> 2.10 s simulate wall, 1.86 s -> 1.56 s in the "
               "core. AccaSim's own time moves by 20% or more with the machine's load (143.6, "
               "115.5 and 96.0 s in three runs), so the ratio of one run moves with it."]
    md += ["", "Then (2026-11-30 04:50): AccaSim 96.0 s, Corral 16.4 s (5.9x). Since: the "
               "pass takes its starts from the caller-kept pool itself (`PoolKeeper.lend`, "
               "no copy per cycle), wide one-core placements find the lowest free nodes at "
               "C level, the engine builds snapshots from a field map and keeps per-job "
               "results in plain lists, short queues skip the C-level pipelines, running "
               "jobs keep their planned ends, the queue order checks admin priorities in one "
               "call; decisions byte-identical (full HPC2N with run and kill, 30,000-job "
               "HPC2N and SDSC-SP2 slices under five policies). Counted in CPU instructions "
               "(callgrind, immune to the machine's load): -15.4% on the first 30,000 HPC2N "
               "jobs; interleaved wall medians there 2.64 -> 2.29 s (1.15x). The remaining "
               "levers (a caller-kept queue order instead of sorting and filtering the "
               "queue every cycle, about 17% of a full replay; job records) need a change of "
               "the core's interface."]
    md += ["", "Then (2026-11-30 06:59): AccaSim 118.0 s, Corral 17.2 s (6.9x). Since: one "
               "pending job that starts at once is decided without building the pass "
               "(`corral.core.passes.alone`, pinned to the pass by a property test; about "
               "half of all cycles on HPC2N), the simulator vouches that its pending tuple is "
               "in submit order so first-come-first-served needs no sort "
               "(`ClusterSnapshot.pending_in_submit_order`), the core's per-job memos are "
               "trimmed every 5,000 cycles instead of clearing the plans with them (which "
               "re-planned every queued request), and the garbage collector is tuned for the "
               "replay (setup frozen, young collections every 50,000 allocations); decisions "
               "byte-identical (17 replays compared before/after: full HPC2N with run and "
               "kill, 30,000-job HPC2N and SDSC-SP2 slices under six policies, whole nodes, "
               "event cycles). Interleaved on this machine, full HPC2N, medians of three: "
               "14.4 s -> 11.8 s simulate wall (1.23x), 11.1 s -> 8.6 s in the core. Tried "
               "and dropped (no gain in instruction counts): placing the unblocked head of "
               "longer queues the same short way (the blocked head is tried twice), and "
               "walking the whole queue behind a reserved head without first narrowing it "
               "(+3.5%). What is left is spread over many functions (the engine loop, the "
               "pass, placement, the queue walk), each a few percent of a replay in a "
               "sampling profile."]
    md += ["", "Then (2026-11-30 08:21): AccaSim 96.2 s, Corral 12.3 s (7.8x); RICC 476 s, "
               "peak 278 MiB. Since, from CPU-instruction counts (callgrind) on HPC2N jobs "
               "120,000-140,000, the slice with the longest queues: the records made once "
               "per job and per cycle (`Job`, `Start`, `CycleStats`, `CycleResult`) store "
               "their fields through their slots instead of the frozen dataclass's "
               "`object.__setattr__` per field, and are built from positional arguments "
               "(keyword arguments made each construction twice as dear); builtin `min`/"
               "`max` (about 750 instructions a call on this Python) gave way to comparisons "
               "where they ran per job or per step (the counted queue walk, the running "
               "minimum of the count profile, one-core placement, the engine loop). "
               "16.54 -> 14.92 billion instructions for the whole process (-10%; about -14% "
               "of the replay once the trace parsing, which did not change, is left out); "
               "decisions byte-identical (the same 17 replays)."]
    md += ["", "Then (2026-11-30 08:49): AccaSim 96.8 s, Corral 10.2 s (9.5x); RICC 425 s, "
               "peak 284 MiB. Since: the simulator's promise that its pending tuple is in "
               "submit order also covers admin priorities (it sets none), so first-come-"
               "first-served takes the tuple as it is instead of scanning it every cycle; the "
               "dependency index is built only when a job has a dependency; the pool keeper "
               "empties its bookkeeping in place. 14.92 -> 14.27 billion instructions on the "
               "same slice (-6.7% of the replay); decisions byte-identical (the same 17 "
               "replays)."]
    md += ["", "Then (2026-11-30 09:00): AccaSim 96.8 s, Corral 9.8 s (9.9x); RICC 384 s, "
               "peak 286 MiB. Since: on a machine of one-CPU nodes the engine counts an "
               "allocation's CPUs as its nodes (-0.5% instructions on the same slice; "
               "decisions byte-identical), and this script runs three interleaved rounds and "
               "reports medians instead of one run of each."]
    if big:
        md += ["", f"RICC-2010-2 ({big['jobs']:,} jobs, 8,192 processors: 1024 nodes x 8 in "
                   "the header, simulated as 8,192 one-core nodes, the default), `fcfs+easy`: "
                   f"{big['process_wall_s']:.0f} s ({big['simulate_wall_s']:.0f} s simulating, "
                   f"{big['cycles']:,} cycles), peak RSS **{big['peak_rss_mib']:.0f} MiB** "
                   "(target < 500 MB)."]
        if "reused_from" in big:
            md[-1] += (" Measured by an earlier run of this script and reused here "
                       f"(`--ricc-json {big['reused_from']}`).")
    (RESULTS / "sim_speed.md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
