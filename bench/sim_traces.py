#!/usr/bin/env python3
"""Replay every shared trace in full with ``corral sim run`` and record how long it took.

One process per trace under ``/usr/bin/time -v`` (wall time, peak RSS), default machine
(the header's nodes, jobs take cores anywhere), ``--policy fcfs+easy``, default trace
handling (drop run time -1, kill at the limit). Writes ``bench/results/sim_traces.json``
and ``.md``. It takes a while on a shared 2-core machine: run it rarely.

Usage: ``.venv/bin/python bench/sim_traces.py [--policy fcfs+easy] [--only NAME ...]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACES = Path(os.environ.get("CORRAL_SHARED", ROOT.parent / "shared")) / "traces"
RESULTS = ROOT / "bench" / "results"
CORRAL = ROOT / ".venv" / "bin" / "corral"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="fcfs+easy")
    ap.add_argument("--only", nargs="*", help="trace file names (default: all)")
    args = ap.parse_args()
    names = sorted((p.name for p in TRACES.iterdir()
                    if p.name not in ("README.md", "SHA256SUMS.txt")),
                   key=lambda n: (TRACES / n).stat().st_size)
    if args.only:
        names = [n for n in names if n in args.only]
    rows = []
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "m.json"
            t0 = time.perf_counter()
            p = subprocess.run(["/usr/bin/time", "-v", str(CORRAL), "sim", "run",
                                str(TRACES / name), "--policy", args.policy, "--json", str(out),
                                "--quiet"], capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if p.returncode != 0:
                sys.exit(f"{name}: failed\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
            m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
            s = json.loads(out.read_text())
        row = {
            "trace": name, "jobs": s["jobs"]["total"], "started": s["jobs"]["started"],
            "rejected": s["jobs"]["rejected"], "killed": s["jobs"]["timeout"],
            "unfinished": s["jobs"]["unfinished"], "machine": s["settings"]["machine"],
            "process_wall_s": round(wall, 1), "simulate_wall_s": s["stats"]["wall_s"],
            "cycles": s["stats"]["cycles"], "peak_rss_mib": round(int(m.group(1)) / 1024)
            if m else None, "mean_wait_s": s["wait_s"]["mean"], "mean_bsld": s["bsld"]["mean"],
            "utilization": s["utilization"]["makespan"],
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M")
    (RESULTS / "sim_traces.json").write_text(json.dumps(
        {"when": stamp, "policy": args.policy, "runs": rows}, indent=1) + "\n")
    md = [f"# Full replays of every shared trace (`{args.policy}`)", "",
          f"Measured {stamp} on this shared 2-CPU machine with "
          "`.venv/bin/python bench/sim_traces.py`; default trace handling (jobs with run "
          "time -1 dropped, killed at their limit), machine from the header.", "",
          "| trace | jobs | machine | wall | peak RSS | mean wait | mean bsld | util | killed |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        md.append(f"| {r['trace']} | {r['jobs']:,} | {r['machine']} | {r['process_wall_s']:.0f} s"
                  f" | {r['peak_rss_mib']} MiB | {r['mean_wait_s'] / 3600:.1f} h | "
                  f"{r['mean_bsld']:.1f} | {r['utilization']:.3f} | {r['killed']:,} |")
    (RESULTS / "sim_traces.md").write_text("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
