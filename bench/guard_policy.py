#!/usr/bin/env python3
"""Does a short-first order with a starvation guard dominate EASY? The table of docs/sim/guard.md.

For each trace (SDSC-SP2, HPC2N, CTC-SP2, Lublin-1) and selection (the first 20,000 jobs,
and the whole trace), replays ``fcfs+easy`` (the reference), ``sjf+easy`` (no guard) and
``sjf+easy`` with the starvation guard (``corral.core.priority.guard``) at each guard of
``--guards``: a duration (``12h``) or a fraction of that run's ``fcfs+easy`` maximum wait
(``0.25f``: a quarter of it, the bound an admin can derive from ``corral sim`` of their own
history). Default machine and options of ``corral sim run`` (one-core nodes, kill at the
limit, one cycle per instant). The target: mean bounded slowdown at most 0.8x
``fcfs+easy``'s and a maximum wait no longer than ``fcfs+easy``'s.

Writes ``bench/results/guard_policy.json`` and ``.md`` (``--out NAME``).

Usage: ``.venv/bin/python bench/guard_policy.py [--sizes 20000,all] [--guards 0.25f,12h]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TRACES = Path(os.environ.get("CORRAL_SHARED", "/work/shared")) / "traces"
RESULTS = ROOT / "bench" / "results"
FILES = {"SDSC-SP2": "SDSC-SP2-1998-4.2-cln.swf.gz", "HPC2N": "HPC2N-2002-2.2-cln.swf.gz",
         "CTC-SP2": "CTC-SP2-1996-3.1-cln.swf.gz", "Lublin-1": "lublin_256.swf"}


def replay(wl: Any, cl: Any, policy: str, guard_s: int | None) -> dict[str, Any]:
    import dataclasses

    from corral.sim.compare import parse_policy
    from corral.sim.engine import EngineOptions, simulate
    from corral.sim.metrics import summarize

    pol = parse_policy(policy)
    cfg = dataclasses.replace(pol.config, starvation_guard_s=guard_s)
    res = simulate(wl, cl, EngineOptions(config=cfg, label=policy))
    s = summarize(res)
    return {"policy": policy, "guard_s": guard_s, "mean_bsld": s["bsld"]["mean"],
            "max_wait_s": s["wait_s"]["max"], "mean_wait_s": s["wait_s"]["mean"],
            "utilization": s["utilization"]["makespan"], "wall_s": res.stats["wall_s"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", default=",".join(FILES))
    ap.add_argument("--sizes", default="20000,all")
    ap.add_argument("--guards", default="0.25f,12h")
    ap.add_argument("--out", default="guard_policy")
    ap.add_argument("--no-unguarded", action="store_true",
                    help="skip sjf+easy without the guard (slow on whole traces, starves)")
    a = ap.parse_args()
    from corral.sim.cluster import from_header
    from corral.sim.swf import read_swf
    from corral.sim.workload import build_workload, select

    rows: list[dict[str, Any]] = []
    for name in a.traces.split(","):
        full = build_workload(read_swf(TRACES / FILES[name]))
        for size in a.sizes.split(","):
            if size != "all" and int(size) >= len(full) and "all" in a.sizes.split(","):
                continue  # the slice is the whole trace, which runs anyway
            wl = select(full, size)
            cl = from_header(wl.max_nodes, wl.max_procs)
            base = replay(wl, cl, "fcfs+easy", None)
            runs = [base] if a.no_unguarded else [base, replay(wl, cl, "sjf+easy", None)]
            for g in a.guards.split(","):
                guard = (round(float(g[:-1]) * base["max_wait_s"]) if g.endswith("f")
                         else round(float(g[:-1]) * {"h": 3600, "d": 86400, "m": 60}[g[-1]]))
                runs.append(replay(wl, cl, "sjf+easy", guard) | {"guard_spec": g})
            for r in runs:
                r["bsld_ratio"] = r["mean_bsld"] / base["mean_bsld"]
                r["max_wait_ratio"] = r["max_wait_s"] / base["max_wait_s"]
                r["meets"] = r["bsld_ratio"] <= 0.8 and r["max_wait_ratio"] <= 1.0
                rows.append({"trace": name, "jobs": len(wl), "selection": size} | r)
                print(json.dumps(rows[-1]), flush=True)
    out = {"measured": time.strftime("%Y-%m-%d %H:%M:%S"), "command":
           f"bench/guard_policy.py --traces {a.traces} --sizes {a.sizes} --guards {a.guards}",
           "rows": rows}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{a.out}.json").write_text(json.dumps(out, indent=1) + "\n")
    (RESULTS / f"{a.out}.md").write_text(render(out))
    print(render(out))


def render(out: dict[str, Any]) -> str:
    def h(s: float) -> str:
        return f"{s / 3600:.1f} h"

    lines = [f"Measured {out['measured']}; `.venv/bin/python {out['command']}`.", "",
             "| trace | jobs | policy | guard | mean bsld | vs fcfs+easy | max wait | "
             "vs fcfs+easy | meets target |", "|---|---|---|---|---|---|---|---|---|"]
    for r in out["rows"]:
        guard = "-" if r["guard_s"] is None else (
            f"{h(r['guard_s'])} ({r.get('guard_spec', '')})")
        ref = r["policy"] == "fcfs+easy" and r["guard_s"] is None
        meets = "-" if ref else ("yes" if r["meets"] else "no")
        lines.append(
            f"| {r['trace']} | {r['jobs']:,} | {r['policy']} | {guard} | {r['mean_bsld']:.1f} "
            f"| {r['bsld_ratio']:.2f} | {h(r['max_wait_s'])} | {r['max_wait_ratio']:.2f} | "
            f"{meets} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
