#!/usr/bin/env python3
"""Golden replays: a digest of every decision of a fixed set of replays, to compare code
before and after a change that must not change decisions.

Each replay is (trace, selection, policy, engine options); its digest is the SHA-256 of
the per-job start, end, state and CPU columns (float64/int64 bytes, in workload order)
plus the policy label. Two runs of the same code give the same digests; a change that
keeps every decision keeps every digest.

Usage::

    .venv/bin/python bench/golden_replays.py --out /tmp/after.json [--set quick|full]
    PYTHONPATH=/tmp/base/src python bench/golden_replays.py --out /tmp/before.json
    .venv/bin/python bench/golden_replays.py --compare /tmp/before.json /tmp/after.json

``quick`` (about a minute on this machine): 5,000-job slices of SDSC-SP2, HPC2N and
CTC-SP2 under seven policies, whole nodes, event cycles, no kill at the estimate.
``full`` (several minutes): 30,000-job HPC2N and SDSC-SP2 slices under six policies and
the whole HPC2N trace with and without kill at the estimate (the 17 replays the earlier
speed work was checked with).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACES = Path(os.environ.get("CORRAL_SHARED", "/work/shared")) / "traces"
if str(ROOT / "src") not in sys.path and "corral" not in sys.modules:
    sys.path.append(str(ROOT / "src"))

SDSC = "SDSC-SP2-1998-4.2-cln.swf.gz"
HPC2N = "HPC2N-2002-2.2-cln.swf.gz"
CTC = "CTC-SP2-1996-3.1-cln.swf.gz"
BLUE = "SDSC-BLUE-2000-4.2-cln.swf.gz"
POLICIES = ("fcfs+strict", "fcfs+easy", "sjf+easy", "f1+easy", "fcfs+conservative",
            "multifactor+easy", "multifactor+easy+nofs")

# (trace, jobs, policy, options): options are whole_nodes, cycle, exceed
Replay = tuple[str, str, str, dict[str, object]]


def replay_set(name: str) -> list[Replay]:
    out: list[Replay] = []
    if name == "quick":
        for trace, sel in ((SDSC, "0:5000"), (HPC2N, "120000:125000"), (CTC, "20000:25000")):
            out += [(trace, sel, p, {}) for p in POLICIES]
        out.append((BLUE, "0:3000", "fcfs+easy", {"whole_nodes": True}))
        out.append((SDSC, "0:3000", "sjf+easy", {"cycle": "event"}))
        out.append((HPC2N, "0:5000", "multifactor+easy", {"exceed": "run"}))
        return out
    if name == "full":
        for trace in (HPC2N, SDSC):
            out += [(trace, "0:30000", p, {}) for p in POLICIES[:6]]
        out.append((BLUE, "0:30000", "fcfs+easy", {"whole_nodes": True}))
        out.append((SDSC, "0:30000", "fcfs+easy", {"cycle": "event"}))
        out.append((HPC2N, "0:30000", "multifactor+easy+nofs", {}))
        out.append((HPC2N, "all", "fcfs+easy", {"exceed": "run"}))
        out.append((HPC2N, "all", "fcfs+easy", {}))
        return out
    raise SystemExit(f"unknown set {name!r}: quick or full")


def run_one(r: Replay) -> dict[str, object]:
    import numpy as np

    from corral.sim.cluster import from_header
    from corral.sim.compare import parse_policy
    from corral.sim.engine import EngineOptions, simulate
    from corral.sim.swf import read_swf
    from corral.sim.workload import ExceedPolicy, build_workload, select

    trace, sel, policy, o = r
    wl = select(build_workload(read_swf(TRACES / trace)), sel)
    whole = bool(o.get("whole_nodes", False))
    cl = from_header(wl.max_nodes, wl.max_procs, whole_nodes=whole,
                     machine="nodes" if whole else "cores")
    pol = parse_policy(policy)
    opt = EngineOptions(config=pol.config, label=pol.label,
                        exceed=ExceedPolicy(str(o.get("exceed", "kill"))),
                        cycle_mode=str(o.get("cycle", "batch")))
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate(wl, cl, opt)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    h = hashlib.sha256(policy.encode())
    for arr in (res.start_s, res.end_s, res.state.astype(np.int64), res.alloc_cpus):
        h.update(np.ascontiguousarray(arr).tobytes())
    return {"trace": trace, "jobs": sel, "policy": policy, "options": o,
            "digest": h.hexdigest(), "wall_s": round(wall, 3), "cpu_s": round(cpu, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", default="quick")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--only", help="substring of 'trace jobs policy' to run")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    a = ap.parse_args()
    if a.compare:
        before = {_key(x): x for x in json.loads(a.compare[0].read_text())["replays"]}
        after = {_key(x): x for x in json.loads(a.compare[1].read_text())["replays"]}
        same = diff = 0
        for k, x in after.items():
            b = before.get(k)
            if b is None:
                continue
            ok = b["digest"] == x["digest"]
            same += ok
            diff += not ok
            print(f"{'same' if ok else 'DIFFERENT':9} {b['wall_s']:8.2f}s {x['wall_s']:8.2f}s "
                  f"{x['wall_s'] / max(b['wall_s'], 1e-9):5.2f}x  {k}")
        print(f"{same} identical, {diff} different")
        raise SystemExit(1 if diff else 0)
    rows = []
    for r in replay_set(a.set):
        if a.only and a.only not in f"{r[0]} {r[1]} {r[2]}":
            continue
        row = run_one(r)
        print(f"{row['wall_s']:8.2f}s wall {row['cpu_s']:8.2f}s cpu {row['digest'][:16]}  "
              f"{_key(row)}", flush=True)
        rows.append(row)
    if a.out:
        a.out.write_text(json.dumps({"set": a.set, "replays": rows}, indent=1) + "\n")


def _key(x: dict[str, object]) -> str:
    opts = x["options"]
    assert isinstance(opts, dict)
    extra = ",".join(f"{k}={v}" for k, v in sorted(opts.items()))
    return f"{x['trace']} {x['jobs']} {x['policy']} {extra}".strip()


if __name__ == "__main__":
    main()
