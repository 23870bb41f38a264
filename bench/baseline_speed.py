#!/usr/bin/env python3
"""A change's effect on replay speed: Corral before and after, AccaSim beside, one run.

Replays HPC2N (all jobs unless ``--jobs N``) with ``fcfs+easy`` and ``--exceed run``
(as ``sim_speed.py``) in AccaSim 1.1.3 once per round and in Corral twice per round: the
current tree and a baseline tree (``--baseline DIR``, a checkout or ``git archive`` of the
code before the change, run with ``PYTHONPATH=DIR/src``), interleaved so that all three see
the same spells of load. Reports the medians and the after/before ratio, and writes
``bench/results/<name>.json`` and ``.md`` (``--name``).

Usage::

    git archive <commit> | tar -x -C /tmp/base
    .venv/bin/python bench/baseline_speed.py --baseline /tmp/base --name queue_pass_speed
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sim_speed  # noqa: E402  (the same runners as the AccaSim comparison)

CPU: list[float] = []  # CPU seconds (user + system) of the last process each run made


def timed_cpu(cmd: list[str], cwd: Path | None = None) -> tuple[str, float, float]:
    """``sim_speed.timed``, also keeping the process's CPU time: on a loaded machine the
    CPU seconds move far less than the wall clock."""
    p = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True,
                       cwd=cwd)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stderr[-4000:]}")
    user = re.search(r"User time \(seconds\): ([\d.]+)", p.stderr)
    system = re.search(r"System time \(seconds\): ([\d.]+)", p.stderr)
    CPU.append(float(user.group(1) if user else "nan") + float(system.group(1) if system
                                                               else "nan"))
    return p.stdout, float("nan"), float("nan")


sim_speed.timed = timed_cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", type=Path, required=True)
    ap.add_argument("--name", default="baseline_speed")
    ap.add_argument("--jobs", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    hpc2n = sim_speed.TRACES / "HPC2N-2002-2.2-cln.swf.gz"
    py = sim_speed.ensure_accasim()
    rows: dict[str, list[dict[str, Any]]] = {"accasim": [], "before": [], "after": []}
    for k in range(a.repeat):
        print(f"round {k + 1}/{a.repeat}", flush=True)
        rows["accasim"].append(sim_speed.run_accasim(py, hpc2n, a.jobs) | {"cpu_s": CPU[-1]})
        os.environ["PYTHONPATH"] = str(a.baseline / "src")
        rows["before"].append(sim_speed.run_corral(hpc2n, a.jobs, "run") | {"cpu_s": CPU[-1]})
        del os.environ["PYTHONPATH"]
        rows["after"].append(sim_speed.run_corral(hpc2n, a.jobs, "run") | {"cpu_s": CPU[-1]})
        for key, v in rows.items():
            print(key, v[-1]["simulate_wall_s"], v[-1]["cpu_s"], flush=True)
    med = {k: statistics.median(r["simulate_wall_s"] for r in v) for k, v in rows.items()}
    cpu = {k: statistics.median(r["cpu_s"] for r in v) for k, v in rows.items()}
    same = len({(r["mean_wait_s"], r["mean_bsld"]) for r in rows["before"] + rows["after"]})
    out = {"measured": time.strftime("%Y-%m-%d %H:%M:%S"), "jobs": a.jobs or "all",
           "rounds": a.repeat, "medians_simulate_wall_s": med,
           "medians_process_cpu_s": cpu,
           "after_over_before": round(med["after"] / med["before"], 3),
           "after_over_before_cpu": round(cpu["after"] / cpu["before"], 3),
           "accasim_over_after": round(med["accasim"] / med["after"], 2),
           "accasim_over_after_cpu": round(cpu["accasim"] / cpu["after"], 2),
           "same_metrics_before_after": same == 1, "runs": rows}
    res = sim_speed.RESULTS
    (res / f"{a.name}.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = [
        f"# {a.name}: Corral before/after a change, AccaSim beside",
        "",
        f"Measured {out['measured']}, HPC2N ({out['jobs']} jobs), `fcfs+easy`, jobs run "
        f"their logged time, {a.repeat} interleaved rounds, medians of the simulation "
        f"loops' wall time. Command: `.venv/bin/python bench/baseline_speed.py "
        f"--baseline DIR --name {a.name}`.",
        "",
        "| simulator | process CPU (median) | simulate wall (median) | CPU per round |",
        "|---|---|---|---|",
        *(f"| {label} | {cpu[k]:.1f} s | {med[k]:.1f} s | "
          f"{', '.join(str(round(r['cpu_s'], 1)) for r in rows[k])} |"
          for k, label in (("accasim", "AccaSim 1.1.3 (EASY)"), ("before", "Corral before"),
                           ("after", "Corral after"))),
        "",
        f"After/before: **{out['after_over_before_cpu']:.3f}** in CPU seconds "
        f"({out['after_over_before']:.3f} in wall time); AccaSim/after: "
        f"{out['accasim_over_after_cpu']:.1f}x CPU, {out['accasim_over_after']:.1f}x wall. "
        f"Same metrics before and after: "
        f"{'yes' if out['same_metrics_before_after'] else 'NO'}. The wall times move with "
        f"the machine's load (other agents share its 2 CPUs); the CPU times much less.",
    ]
    (res / f"{a.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
