"""Latency of the Slurm/PBS shims against a real Slurm 22.05, same machine, same run.

What a workflow tool does in a loop: start ``sbatch``, ``squeue``, ``sacct`` ... as a new
process and wait for it. Three sides, all up at once and called in turn (compiled,
Python, Slurm; the order rotates every round), so that drift of a shared machine falls on
all three alike:

- Corral, compiled launcher (``corral shims install``, ``launcher.c``);
- Corral, Python launcher (``corral shims install --python-only``, ``lean.py``);
- Slurm 22.05 (``shared/bench/slurm/setup.sh acct``: slurmctld + slurmdbd on MariaDB, so
  that ``sacct`` has something to read; ``default`` when slurmdbd is not installed).

Each row is the median over ``--reps`` calls with N (2000) held jobs in both queues. PBS
commands have no PBS to compare with: they are set against Slurm's nearest command
(``qsub`` against ``sbatch``, ``qstat`` against ``squeue``, ``qdel`` against ``scancel``).
The ratio column is the median of the per-round ratios compiled/Slurm.

Corral: ``corral up`` with a 64-CPU node (as the reference Slurm's ``config_overrides``).
Slurm needs root; it is stopped afterwards with ``stop.sh``.

Run: ``.venv/bin/python bench/shim_latency.py --slurm`` (about 3 minutes). Results:
``bench/results/shim_latency.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import pwd
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# ../shared/bench/slurm beside the checkout (or beside the worktrees' folder)
SLURM_DIR = next((d for d in (ROOT.parent / "shared" / "bench" / "slurm",
                              ROOT.parent.parent / "shared" / "bench" / "slurm")
                  if d.is_dir()), ROOT.parent / "shared" / "bench" / "slurm")
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
SCRIPT = "#!/bin/sh\n#SBATCH -t 1 -n1 -o /dev/null\ntrue\n"
PBS_SCRIPT = "#!/bin/sh\n#PBS -l walltime=60\ntrue\n"
SIDES = ("c", "py", "slurm")

Argv = Callable[[int], list[str]]


def call(argv: list[str], env: dict[str, str], cwd: str, stdin: str | None,
         ok: bool = True) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=env, cwd=cwd, input=stdin or "", capture_output=True,
                       text=True)
    dt = time.perf_counter() - t0
    if ok and p.returncode != 0:
        raise RuntimeError(f"{argv[:4]} failed ({p.returncode}): {p.stderr.strip()[:400]}")
    return dt, p.stdout


class Sides:
    """The three ways to call a command: per side, the command line and environment."""

    def __init__(self, c_bin: Path, py_bin: Path, corral_env: dict[str, str],
                 slurm_env: dict[str, str], cwd: str) -> None:
        self.bins = {"c": str(c_bin), "py": str(py_bin), "slurm": "/usr/bin"}
        self.envs = {"c": corral_env, "py": corral_env, "slurm": slurm_env}
        self.cwd = cwd
        self.ids: dict[str, dict[str, list[str]]] = {s: {} for s in SIDES}

    def argv(self, side: str, cmd: str, args: list[str]) -> list[str]:
        return [f"{self.bins[side]}/{cmd}", *args]


def measure(sides: Sides, rows: list[dict[str, Any]], reps: int,
            slurm: bool) -> dict[str, Any]:
    """Each row ``reps`` rounds, the sides in rotating order within a round."""
    out: dict[str, Any] = {}
    use = SIDES if slurm else SIDES[:2]
    for row in rows:
        times: dict[str, list[float]] = {s: [] for s in use}
        lines: dict[str, int] = {}
        for r in range(reps):
            order = use[r % len(use):] + use[:r % len(use)]
            for side in order:
                spec = row["slurm"] if side == "slurm" else row["corral"]
                if spec is None:
                    continue
                cmd, args = spec(sides, side, r)
                dt, text = call(sides.argv(side, cmd, args), sides.envs[side], sides.cwd,
                                row.get("stdin"), ok=row.get("ok", True))
                times[side].append(dt)
                lines[side] = text.count("\n")
                keep = row.get("keep")
                if keep:
                    sides.ids[side].setdefault(keep, []).append(text.strip().split(";")[0])
        res: dict[str, Any] = {"label": row["label"], "slurm_cmd": row.get("slurm_label")}
        for side in use:
            if times[side]:
                xs = times[side]
                res[side] = {"median_ms": statistics.median(xs) * 1000,
                             "min_ms": min(xs) * 1000, "max_ms": max(xs) * 1000,
                             "n": len(xs), "lines": lines.get(side, 0)}
        if slurm and times["c"] and times.get("slurm"):
            pairs = [a / b for a, b in zip(times["c"], times["slurm"], strict=False) if b]
            res["ratio_c_slurm"] = statistics.median(pairs)
        out[row["key"]] = res
        c = res.get("c", {}).get("median_ms")
        s = res.get("slurm", {}).get("median_ms")
        print(f"  {row['label'].format(n='N'):<44} compiled {c or float('nan'):6.1f}  python "
              f"{res.get('py', {}).get('median_ms', float('nan')):6.1f}  slurm "
              f"{s or float('nan'):6.1f} ms", flush=True)
    return out


def fixed(cmd: str, args: list[str]) -> Callable[[Sides, str, int], tuple[str, list[str]]]:
    return lambda sides, side, r: (cmd, args)


def with_id(cmd: str, before: list[str], key: str, after: list[str] = []  # noqa: B006
            ) -> Callable[[Sides, str, int], tuple[str, list[str]]]:
    """``cmd before ID after`` with the r-th id this side kept under ``key``."""
    return lambda sides, side, r: (cmd, [*before, sides.ids[side][key][r], *after])


def rows_for(user: str, sacct_on_slurm: bool) -> list[dict[str, Any]]:
    one = with_id
    return [
        {"key": "sbatch_pending", "label": "sbatch --wrap ({n} pending)", "keep": "wrap",
         "corral": fixed("sbatch", HOLD), "slurm": fixed("sbatch", HOLD)},
        {"key": "sbatch_stdin", "label": "sbatch, script on stdin", "keep": "stdin",
         "stdin": SCRIPT, "corral": fixed("sbatch", ["--hold", "--parsable"]),
         "slurm": fixed("sbatch", ["--hold", "--parsable"])},
        {"key": "sbatch_bad_option", "label": "sbatch --bogus (error, exit 255)", "ok": False,
         "corral": fixed("sbatch", ["--bogus"]), "slurm": fixed("sbatch", ["--bogus"])},
        {"key": "squeue_pending", "label": "squeue (all {n} printed)",
         "corral": fixed("squeue", []), "slurm": fixed("squeue", [])},
        {"key": "squeue_user", "label": "squeue -u USER -h -o '%i %t'",
         "corral": fixed("squeue", ["-u", user, "-h", "-o", "%i %t"]),
         "slurm": fixed("squeue", ["-u", user, "-h", "-o", "%i %t"])},
        {"key": "squeue_one", "label": "squeue -h -j ID -o '%i %t'",
         "corral": one("squeue", ["-h", "-j"], "wrap", ["-o", "%i %t"]),
         "slurm": one("squeue", ["-h", "-j"], "wrap", ["-o", "%i %t"])},
        {"key": "scontrol_show_job", "label": "scontrol show job ID",
         "corral": one("scontrol", ["show", "job"], "wrap"),
         "slurm": one("scontrol", ["show", "job"], "wrap")},
        {"key": "sacct_one", "label": "sacct -j ID -P -o JobID,State",
         "corral": one("sacct", ["-P", "-o", "JobID,State", "-j"], "wrap"),
         "slurm": one("sacct", ["-P", "-o", "JobID,State", "-j"], "wrap")
         if sacct_on_slurm else None},
        {"key": "sinfo", "label": "sinfo", "corral": fixed("sinfo", []),
         "slurm": fixed("sinfo", [])},
        {"key": "scancel_one", "label": "scancel ID (a held job)",
         "corral": one("scancel", [], "wrap"), "slurm": one("scancel", [], "wrap")},
        {"key": "qsub_pending", "label": "qsub -h job.pbs", "slurm_label": "sbatch --hold job.sh",
         "keep": "qsub", "corral": fixed("qsub", ["-h", "job.pbs"]),
         "slurm": fixed("sbatch", ["--hold", "--parsable", "job.sh"])},
        {"key": "qstat_pending", "label": "qstat (all {n} printed)", "slurm_label": "squeue",
         "corral": fixed("qstat", []), "slurm": fixed("squeue", [])},
        {"key": "qdel_one", "label": "qdel ID", "slurm_label": "scancel ID",
         "corral": one("qdel", [], "qsub"), "slurm": one("scancel", [], "qsub")},
    ]


def corral_up(work: Path, n: int) -> tuple[dict[str, str], Path, Path, Path]:
    sd, cfg = work / "state", work / "corral.toml"
    cfg.write_text(CONFIG)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CORRAL_", "SLURM_", "SQUEUE_", "SBATCH_"))}
    env["CORRAL_STATE_DIR"] = str(sd)
    py = [sys.executable, "-c", ENTRY]
    up = subprocess.run([*py, "up", "--detach", "--state-dir", str(sd), "--config", str(cfg),
                         "--node-name", "bench"], env=env, capture_output=True, text=True)
    if up.returncode != 0:
        raise RuntimeError(f"corral up failed: {up.stderr}")
    c_bin, py_bin = work / "bin-c", work / "bin-py"
    subprocess.run([*py, "shims", "install", str(c_bin), "--force"], env=env, check=True,
                   capture_output=True)
    subprocess.run([*py, "shims", "install", str(py_bin), "--force", "--python-only"],
                   env=env, check=True, capture_output=True)
    if (c_bin / "sbatch").read_bytes()[:4] != b"\x7fELF":
        raise RuntimeError("the compiled launcher was not built (no cc?)")
    from corral.client import Client

    with Client(socket_path=str(sd / "corral.sock")) as c:
        body = {"spec": {"name": "wrap", "time_limit_s": 60}, "argv": ["true"],
                "workdir": str(work), "stdout": "/dev/null", "hold": True}
        for _ in range(n):
            c.submit(body)
    return env, sd, c_bin, py_bin


def corral_down(env: dict[str, str], sd: Path) -> None:
    subprocess.run([sys.executable, "-c", ENTRY, "down", "--state-dir", str(sd)], env=env,
                   capture_output=True)


def slurm_up(profile: str, n: int, cwd: str) -> dict[str, str]:
    r = subprocess.run([str(SLURM_DIR / "setup.sh"), profile], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"Slurm setup failed: {r.stdout[-1500:]}\n{r.stderr[-1500:]}")
    env = {**os.environ, "SLURM_CONF": "/var/tmp/slurm-anchor/slurm.conf"}
    for _ in range(n):
        call(["/usr/bin/sbatch", *HOLD], env, cwd, None)
    return env


def render_md(res: dict[str, Any]) -> str:
    n = res["n"]
    lines = [
        "# Shim latency: Corral's Slurm/PBS commands vs Slurm 22.05 (same machine, same run)",
        "",
        f"Run {res['when']} on {res['host']}; {res['reps']} calls per row and side (median), "
        f"each a new process, the three sides in turn; {n} held jobs in each queue. Command: "
        f"`{res['command']}`. Slurm profile: `{res.get('slurm_profile', '—')}`. Load average "
        f"at start: {res['load']}.",
        "",
        "| call | Corral, compiled (ms) | Corral, Python (ms) | Slurm 22.05 (ms) | "
        "compiled / Slurm | p50 ≤ Slurm? |",
        "|---|---|---|---|---|---|",
    ]
    met = missed = 0
    for row in res["rows"].values():
        c = row.get("c", {}).get("median_ms")
        p = row.get("py", {}).get("median_ms")
        s = row.get("slurm", {}).get("median_ms")
        r = row.get("ratio_c_slurm")
        label = row["label"].format(n=n)
        if row.get("slurm_cmd"):
            label += f" (Slurm: `{row['slurm_cmd']}`)"
        ok = "—"
        if c is not None and s is not None:
            ok = "yes" if c <= s else "**no**"
            met, missed = (met + 1, missed) if c <= s else (met, missed + 1)
        lines.append(f"| {label} | {c:.1f} | {p:.1f} | "
                     f"{'—' if s is None else f'{s:.1f}'} | "
                     f"{'—' if r is None else f'{r:.2f}×'} | {ok} |")
    st = res.get("python_IS_start_ms")
    lines += ["", f"Python interpreter start alone (`python -IS -c pass`): {st:.1f} ms, "
              "paid by every call of the Python launcher." if st else "",
              f"Target (issue 19 item 0): every command's p50 at or below Slurm's: "
              f"{met} rows met, {missed} missed."]
    if res.get("notes"):
        lines += ["", str(res["notes"]).strip()]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--slurm", action="store_true", help="also run Slurm 22.05 (root)")
    ap.add_argument("--slurm-profile", default="",
                    help="setup.sh profile (default: acct if slurmdbd is installed, else "
                         "default)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--render", type=Path, default=None,
                    help="only write the results again from this shim_latency.json")
    args = ap.parse_args()
    if args.render is not None:
        res0 = json.loads(args.render.read_text())
        (args.out / "shim_latency.md").write_text(render_md(res0))
        print(render_md(res0))
        return
    profile = args.slurm_profile or ("acct" if shutil.which("slurmdbd") else "default")
    work = Path(tempfile.mkdtemp(prefix="shim-latency-"))
    os.chmod(work, 0o755)
    (work / "job.sh").write_text(SCRIPT)
    (work / "job.pbs").write_text(PBS_SCRIPT)
    res: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(), "n": args.n,
        "reps": args.reps, "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "command": "python bench/shim_latency.py" + (" --slurm" if args.slurm else ""),
        "slurm_profile": profile if args.slurm else None,
    }
    user = pwd.getpwuid(os.getuid()).pw_name
    env, sd = os.environ.copy(), work / "state"
    try:
        print("Corral up, N held jobs ...", flush=True)
        env, sd, c_bin, py_bin = corral_up(work, args.n)
        slurm_env: dict[str, str] = {}
        if args.slurm:
            print(f"Slurm up ({profile}), N held jobs ...", flush=True)
            slurm_env = slurm_up(profile, args.n, str(work))
        sides = Sides(c_bin, py_bin, env, slurm_env, str(work))
        res["rows"] = measure(sides, rows_for(user, profile == "acct"), args.reps,
                              args.slurm)
        starts = [call([sys.executable, "-IS", "-c", "pass"], env, str(work), None)[0]
                  for _ in range(args.reps)]
        res["python_IS_start_ms"] = statistics.median(starts) * 1000
    finally:
        if args.slurm:
            subprocess.run([str(SLURM_DIR / "stop.sh")], capture_output=True, text=True)
        corral_down(env, sd)
        shutil.rmtree(work, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "shim_latency.json").write_text(json.dumps(res, indent=2) + "\n")
    md = render_md(res)
    (args.out / "shim_latency.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
