"""Latency of the Slurm/PBS shims against a real Slurm 22.05, same machine, same run.

What a workflow tool does in a loop: start ``sbatch`` or ``squeue`` as a new process and
wait for it. Measured here, each as the median over ``--reps`` calls:

- ``sbatch --hold --wrap=true -n1 -t 1 --parsable -o /dev/null`` with N (2000) held jobs
  in the queue, and the same without any job;
- ``squeue`` (default format, all N jobs printed) with N held jobs;
- ``squeue -h -j <id> -o '%i %t'`` (one job) and ``sacct -j <id> -P -o JobID,State``;
- ``qsub`` and ``qstat`` with N held jobs (Corral only; there is no PBS to compare with);
- an empty ``python -IS`` start, the floor under every shim call.

Corral: ``corral up`` with a 64-CPU node (as the reference Slurm's ``config_overrides``),
shims from ``corral shims install``. Slurm: ``shared/bench/slurm/setup.sh default``, run
only with ``--slurm`` (needs root; stopped afterwards with ``stop.sh``).

Run: ``.venv/bin/python bench/shim_latency.py --slurm`` (about 3 minutes). Results:
``bench/results/shim_latency.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SLURM_DIR = ROOT.parent / "shared" / "bench" / "slurm"
RESULTS = ROOT / "bench" / "results"
ENTRY = "from corral.cli.main import main; main()"
CONFIG = """
[[nodes]]
name = "bench"
discover = true
cpus = 64
mem_mb = 16000
[scheduler]
default_mem_per_cpu_mb = 100
"""
HOLD = ["--hold", "--wrap=true", "-n1", "-t", "1", "--parsable", "-o", "/dev/null"]


def median_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000.0 if xs else float("nan")


def timed(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{argv[:4]} failed ({p.returncode}): {p.stderr.strip()[:400]}")
    return dt, p.stdout


def series(argv: list[str], env: dict[str, str], cwd: str, reps: int) -> dict[str, Any]:
    times = []
    out = ""
    for _ in range(reps):
        dt, out = timed(argv, env, cwd)
        times.append(dt)
    return {"median_ms": median_ms(times), "min_ms": min(times) * 1000,
            "max_ms": max(times) * 1000, "n": reps, "lines": out.count("\n")}


def corral_side(n: int, reps: int, work: Path) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="shim-bench-", dir=work))
    sd, cfg, bindir = root / "state", root / "corral.toml", root / "bin"
    cfg.write_text(CONFIG)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CORRAL_", "SLURM_", "SQUEUE_", "SBATCH_"))}
    env["CORRAL_STATE_DIR"] = str(sd)
    py = [sys.executable, "-c", ENTRY]
    up = subprocess.run([*py, "up", "--detach", "--state-dir", str(sd), "--config", str(cfg),
                         "--node-name", "bench"], env=env, capture_output=True, text=True)
    if up.returncode != 0:
        raise RuntimeError(f"corral up failed: {up.stderr}")
    try:
        subprocess.run([*py, "shims", "install", str(bindir), "--force"], env=env, check=True,
                       capture_output=True)
        b = str(bindir)
        res: dict[str, Any] = {}
        res["sbatch_idle"] = series([f"{b}/sbatch", *HOLD], env, str(root), reps)
        from corral.client import Client

        with Client(socket_path=str(sd / "corral.sock")) as c:
            body = {"spec": {"name": "wrap", "time_limit_s": 60}, "argv": ["true"],
                    "workdir": str(root), "stdout": "/dev/null", "hold": True}
            for _ in range(n - reps):
                c.submit(body)
        res["sbatch_pending"] = series([f"{b}/sbatch", *HOLD], env, str(root), reps)
        res["squeue_pending"] = series([f"{b}/squeue"], env, str(root), reps)
        jid = timed([f"{b}/sbatch", *HOLD], env, str(root))[1].strip()
        res["squeue_one"] = series([f"{b}/squeue", "-h", "-j", jid, "-o", "%i %t"], env,
                                   str(root), reps)
        res["sacct_one"] = series([f"{b}/sacct", "-j", jid, "-P", "-o", "JobID,State"], env,
                                  str(root), reps)
        res["scontrol_show_job"] = series([f"{b}/scontrol", "show", "job", jid], env,
                                          str(root), reps)
        res["sinfo"] = series([f"{b}/sinfo"], env, str(root), reps)
        script = root / "job.pbs"
        script.write_text("#!/bin/sh\n#PBS -l walltime=60\ntrue\n")
        res["qsub_pending"] = series([f"{b}/qsub", "-h", str(script)], env, str(root), reps)
        res["qstat_pending"] = series([f"{b}/qstat"], env, str(root), reps)
        res["python_IS_start"] = series([sys.executable, "-IS", "-c", "pass"], env, str(root),
                                        reps)
        with Client(socket_path=str(sd / "corral.sock")) as c:
            ids = [j["job_id"] for j in c.jobs(fields=["job_id"])]
            c.cancel(ids)
        return res
    finally:
        subprocess.run([*py, "down", "--state-dir", str(sd)], env=env, capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


def slurm_side(n: int, reps: int, work: Path) -> dict[str, Any]:
    r = subprocess.run([str(SLURM_DIR / "setup.sh"), "default"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError(f"Slurm setup failed: {r.stdout[-1500:]}\n{r.stderr[-1500:]}")
    env = {**os.environ, "SLURM_CONF": "/var/tmp/slurm-anchor/slurm.conf"}
    cwd = str(work)
    try:
        res: dict[str, Any] = {}
        res["sbatch_idle"] = series(["/usr/bin/sbatch", *HOLD], env, cwd, reps)
        for _ in range(n - reps):
            timed(["/usr/bin/sbatch", *HOLD], env, cwd)
        res["sbatch_pending"] = series(["/usr/bin/sbatch", *HOLD], env, cwd, reps)
        res["squeue_pending"] = series(["/usr/bin/squeue"], env, cwd, reps)
        jid = timed(["/usr/bin/sbatch", *HOLD], env, cwd)[1].strip()
        res["squeue_one"] = series(["/usr/bin/squeue", "-h", "-j", jid, "-o", "%i %t"], env,
                                   cwd, reps)
        res["scontrol_show_job"] = series(["/usr/bin/scontrol", "show", "job", jid], env, cwd,
                                          reps)
        res["sinfo"] = series(["/usr/bin/sinfo"], env, cwd, reps)
        subprocess.run(["/usr/bin/scancel", "--user", "root"], env=env, capture_output=True)
        return res
    finally:
        subprocess.run([str(SLURM_DIR / "stop.sh")], capture_output=True, text=True)


ROWS = [
    ("sbatch, empty queue", "sbatch_idle"),
    ("sbatch, {n} jobs pending", "sbatch_pending"),
    ("squeue, {n} jobs pending (all printed)", "squeue_pending"),
    ("squeue -j ID -o '%i %t'", "squeue_one"),
    ("sacct -j ID -P", "sacct_one"),
    ("scontrol show job ID", "scontrol_show_job"),
    ("sinfo", "sinfo"),
    ("qsub, {n} jobs pending", "qsub_pending"),
    ("qstat, {n} jobs pending", "qstat_pending"),
    ("python -IS -c pass (interpreter start)", "python_IS_start"),
]


def render_md(res: dict[str, Any]) -> str:
    n = res["n"]
    lines = [
        "# Shim latency: Corral's Slurm/PBS commands vs Slurm 22.05 (same machine, same run)",
        "",
        f"Run {res['when']} on {res['host']}; {res['reps']} calls per row (median), each a new "
        f"process; {n} held jobs. Command: `{res['command']}`. Load average at start: "
        f"{res['load']}.",
        "",
        "| call | Corral (ms) | Slurm 22.05 (ms) | Corral / Slurm |",
        "|---|---|---|---|",
    ]
    cor, sl = res["corral"], res.get("slurm") or {}
    for label, key in ROWS:
        c = cor.get(key, {}).get("median_ms")
        s = sl.get(key, {}).get("median_ms")
        cs = f"{c:.1f}" if c is not None else "—"
        ss = f"{s:.1f}" if s is not None else "—"
        ratio = f"{c / s:.2f}×" if c is not None and s else "—"
        lines.append(f"| {label.format(n=n)} | {cs} | {ss} | {ratio} |")
    lines += ["", "Targets (issue 5): `sbatch` within 30 ms median, `squeue` with 2,000 jobs "
              "within 50 ms.", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--slurm", action="store_true", help="also run Slurm 22.05 (root)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="shim-latency-"))
    res: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(), "n": args.n,
        "reps": args.reps, "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "command": "python bench/shim_latency.py" + (" --slurm" if args.slurm else ""),
    }
    try:
        res["corral"] = corral_side(args.n, args.reps, work)
        if args.slurm:
            res["slurm"] = slurm_side(args.n, args.reps, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "shim_latency.json").write_text(json.dumps(res, indent=2) + "\n")
    md = render_md(res)
    (args.out / "shim_latency.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
