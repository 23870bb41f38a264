#!/usr/bin/env python3
"""multifactor+easy against fcfs+easy on the same trace, CPU seconds, with a baseline tree.

Replays one selection (default: the first 20,000 CTC-SP2 jobs, the case of issue 18)
under ``fcfs+easy`` and ``multifactor+easy`` in this tree, and, with ``--baseline DIR``,
``multifactor+easy`` in the code of DIR (a ``git archive`` of the commit before the change,
run with ``PYTHONPATH=DIR/src`` in a child process). Process CPU seconds of the
simulation (``time.process_time``), interleaved rounds, minimum and median per policy
(the ratio of each, and of each round's pair: the machine is shared, so noise hits
both runs of a round alike; the load average is recorded). Writes
``bench/results/multifactor_speed.json`` and ``.md``.

Usage: ``.venv/bin/python bench/multifactor_speed.py [--baseline /tmp/base] [--rounds 2]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACES = Path(os.environ.get("CORRAL_SHARED", "/work/shared")) / "traces"
CHILD = """
import sys, time
from corral.sim.swf import read_swf
from corral.sim.workload import build_workload, select
from corral.sim.cluster import from_header
from corral.sim.compare import parse_policy
from corral.sim.engine import EngineOptions, simulate
wl = select(build_workload(read_swf(sys.argv[1])), sys.argv[2])
cl = from_header(wl.max_nodes, wl.max_procs)
p = parse_policy("fcfs+easy" if sys.argv[3] == "none" else sys.argv[3])
c0 = time.process_time()
if sys.argv[3] != "none":  # none: everything but the simulation (--instructions)
    r = simulate(wl, cl, EngineOptions(config=p.config))
    print(time.process_time() - c0, float(r.start_s.sum()))
"""


def run(trace: Path, jobs: str, policy: str, src: Path | None) -> tuple[float, float]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src / "src")
    out = subprocess.run([sys.executable, "-c", CHILD, str(trace), jobs, policy], env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), float(out[1])


def instructions(trace: Path, jobs: str, policy: str, src: Path | None) -> int:
    """Instructions the simulation executes (``valgrind --tool=cachegrind``, without cache
    simulation; a run that stops before simulating is subtracted): a count that the load
    of a shared machine does not move, unlike CPU seconds. Hash seed fixed."""
    env = dict(os.environ, PYTHONHASHSEED="0")
    if src is not None:
        env["PYTHONPATH"] = str(src / "src")

    def count(what: str) -> int:
        err = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no",
                              "--cachegrind-out-file=/dev/null", sys.executable, "-c",
                              CHILD, str(trace), jobs, what], env=env, capture_output=True,
                             text=True, check=True).stderr
        line = next(x for x in err.splitlines() if "I   refs:" in x or "I refs:" in x)
        return int(line.split(":")[1].replace(",", ""))

    return count(policy) - count("none")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default="CTC-SP2-1996-3.1-cln.swf.gz")
    ap.add_argument("--jobs", default="20000")
    ap.add_argument("--baseline", type=Path)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--instructions", action="store_true",
                    help="also count each case's instructions under cachegrind (minutes)")
    a = ap.parse_args()
    trace = TRACES / a.trace
    cases = [("fcfs+easy", None), ("multifactor+easy", None)]
    if a.baseline:
        cases.append(("multifactor+easy", a.baseline))
    cpu: dict[str, list[float]] = {}
    check: dict[str, float] = {}
    load_before = [round(x, 2) for x in os.getloadavg()]
    pair_ratios: list[float] = []  # multifactor / fcfs within each round (same noise)
    for _ in range(a.rounds):
        for policy, src in cases:
            key = policy + (" (before)" if src else "")
            c, digest = run(trace, a.jobs, policy, src)
            cpu.setdefault(key, []).append(round(c, 2))
            check[key] = digest
            print(key, c, flush=True)
        pair_ratios.append(round(cpu["multifactor+easy"][-1] / cpu["fcfs+easy"][-1], 3))
    load_after = [round(x, 2) for x in os.getloadavg()]
    instr: dict[str, int] = {}
    if a.instructions:
        for policy, src in cases:
            key = policy + (" (before)" if src else "")
            instr[key] = instructions(trace, a.jobs, policy, src)
            print(key, instr[key], "instructions", flush=True)
    best = {k: min(v) for k, v in cpu.items()}
    median = {k: round(statistics.median(v), 2) for k, v in cpu.items()}
    ratio = best["multifactor+easy"] / best["fcfs+easy"]
    median_ratio = median["multifactor+easy"] / median["fcfs+easy"]
    out = {"measured": time.strftime("%Y-%m-%d %H:%M:%S"), "trace": a.trace, "jobs": a.jobs,
           "cpu_s": cpu, "min_cpu_s": best, "median_cpu_s": median,
           "multifactor_over_fcfs": round(ratio, 2),
           "multifactor_over_fcfs_median": round(median_ratio, 2),
           "pair_ratios": pair_ratios,
           "pair_ratio_median": round(statistics.median(pair_ratios), 3),
           "load_average_before": load_before, "load_average_after": load_after,
           "same_starts_before_after": (check.get("multifactor+easy (before)")
                                        in (None, check["multifactor+easy"]))}
    if a.baseline:
        out["before_multifactor_over_fcfs"] = round(
            best["multifactor+easy (before)"] / best["fcfs+easy"], 2)
        out["before_multifactor_over_fcfs_median"] = round(
            median["multifactor+easy (before)"] / median["fcfs+easy"], 2)
    if instr:
        out["instructions"] = instr
        out["instructions_multifactor_over_fcfs"] = round(
            instr["multifactor+easy"] / instr["fcfs+easy"], 3)
        if a.baseline:
            out["instructions_before_multifactor_over_fcfs"] = round(
                instr["multifactor+easy (before)"] / instr["fcfs+easy"], 3)
    res = ROOT / "bench" / "results"
    (res / "multifactor_speed.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = [f"# multifactor+easy vs fcfs+easy ({a.trace}, jobs {a.jobs})", "",
             f"Measured {out['measured']}; `.venv/bin/python bench/multifactor_speed.py "
             f"--trace {a.trace} --jobs {a.jobs} --rounds {a.rounds}"
             + (" --baseline DIR" if a.baseline else "")
             + (" --instructions`" if a.instructions else "`")
             + ". Simulation CPU seconds, minimum and median of the rounds.", "",
             "| policy | CPU s (min) | CPU s (median) | rounds |", "|---|---|---|---|"]
    lines += [f"| {k} | {best[k]:.2f} | {median[k]:.2f} | {', '.join(map(str, v))} |"
              for k, v in cpu.items()]
    lines += ["", f"multifactor+easy / fcfs+easy: **{ratio:.2f}x** of the minimums, "
              f"**{median_ratio:.2f}x** of the medians"
              + (f" (before: {out['before_multifactor_over_fcfs']:.2f}x and "
                 f"{out['before_multifactor_over_fcfs_median']:.2f}x)" if a.baseline else "")
              + f"; per round (interleaved pairs) {', '.join(f'{r:.2f}' for r in pair_ratios)}"
              f"x, median **{out['pair_ratio_median']:.2f}x**; load average (1, 5, 15 min) "
              f"{', '.join(map(str, load_before))} before, "
              f"{', '.join(map(str, load_after))} after"
              + "; same start times before and after: "
              f"{'yes' if out['same_starts_before_after'] else 'NO'}. Target of issue 18: "
              f"2x."]
    if instr:
        lines += ["", "Instructions of the simulation (`--instructions`: cachegrind, one run "
                  "each, hash seed 0; not moved by the machine's load):", "",
                  "| policy | instructions |", "|---|---|"]
        lines += [f"| {k} | {v / 1e6:,.0f}M |" for k, v in instr.items()]
        lines += ["", "multifactor+easy / fcfs+easy in instructions: "
                  f"**{out['instructions_multifactor_over_fcfs']:.3f}x**"
                  + (f" (before: {out['instructions_before_multifactor_over_fcfs']:.3f}x)"
                     if a.baseline else "") + "."]
    (res / "multifactor_speed.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
