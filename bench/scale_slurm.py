"""Slurm 22.05 with a deep queue, beside ``bench/scale.py`` (issue 19 item 2).

For each N pending (default 10,000 and 100,000), on a fresh Slurm cluster on this host:

1. start: the ``multi`` profile of ``shared/bench/slurm`` (four node names ``n1..n4`` of
   16 CPUs each, one ``slurmd`` per name, ``config_overrides``) rendered with
   ``MaxJobCount`` raised to 200,000 (the profile's 100,000 leaves no room for the probes
   at N = 100,000); the start follows ``setup.sh`` step by step (munged if none runs,
   ``slurmctld -i``, one ``slurmd -N`` per node name) and ``stop.sh`` stops it;
2. queue: N held trivial jobs (``sbatch -H --wrap=true -o /dev/null``), submitted by C
   concurrent shell loops (one new ``sbatch`` process per job, timed with bash's
   ``$EPOCHREALTIME``): submit rate, p50/p99 of one call under that load;
3. with N pending: ``slurmctld`` RSS (``VmRSS``) and RSS per pending job over the RSS
   before the first submit; the size of ``StateSaveLocation``; then, each a new process
   and one after another, ``sbatch`` (held, p50/p99 of ~20 calls), ``squeue -h -j ID -o
   '%i %t'``, ``squeue -h -u USER -o '%i %t'`` and plain ``squeue`` (p50; all jobs are the
   bench user's, so ``-u`` prints all N too), the same calls ``scale.py`` times on Corral;
4. drain (N ≤ ``--drain-max``, default 10,000): every job released (``scontrol release``
   with 1,000 ids a call); time until ``squeue`` prints nothing, polled every second
   (``squeue -h -o %t``, which also gives how many are still pending): jobs/s over the
   whole drain and jobs started per second between 10 % and 90 % started, and
   ``slurmctld``'s CPU ms per job. Above ``--drain-max`` the jobs are released and
   watched until ``--partial-drain-s`` seconds have passed since the release began (how
   many started and ended by then), because the full drain at Slurm's rate here would
   take more than an hour; the release itself counts in that time (at 100,000 it took
   longer than the window, so the window is the release).

At the end of a point with more than ``FAST_STOP`` jobs left, slurmctld is stopped by
its pid (SIGTERM) before ``stop.sh`` runs: ``stop.sh``'s ``scancel --full`` of ~87,000
jobs had not returned after three minutes, and its wait polls ``squeue`` with the whole
queue each time. The next start wipes the state anyway.

Needs root (it starts the daemons). Slurm's job state is wiped at each start. Results:
``bench/results/scale_slurm.{json,md}``. Run: ``python3 bench/scale_slurm.py`` (or
``--jobs 500`` for a quick try).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import pwd
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
# ../shared/bench/slurm beside the checkout (or beside the worktrees' folder)
SLURM_DIR = next((d for d in (ROOT.parent / "shared" / "bench" / "slurm",
                              ROOT.parent.parent / "shared" / "bench" / "slurm")
                  if d.is_dir()), ROOT.parent / "shared" / "bench" / "slurm")
RUN = Path("/var/tmp/slurm-anchor")
CONF = RUN / "slurm.conf"
MAX_JOB_COUNT = 200000
ENV = {**os.environ, "SLURM_CONF": str(CONF)}
_HZ = os.sysconf("SC_CLK_TCK")

# One submitting loop: prints "<job id> <seconds>" per job (bash times each call without
# an extra fork), and "ERR <seconds> <message>" for a failed call.
SUBMIT_LOOP = r"""
n=$1
for ((i = 0; i < n; i++)); do
  t0=$EPOCHREALTIME
  out=$(sbatch -H --parsable --wrap=true -o /dev/null -J s 2>&1)
  rc=$?
  t1=$EPOCHREALTIME
  if [ $rc -eq 0 ]; then echo "$out $t0 $t1"; else echo "ERR $t0 $t1 ${out//$'\n'/ }"; fi
done
"""


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_s(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / _HZ


def sh(argv: list[str], check: bool = True, **kw: Any) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(argv, env=ENV, capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise RuntimeError(f"{argv[:3]} exited {p.returncode}: {p.stderr[-500:]}")
    return p


# ---- the cluster ----------------------------------------------------------------------

def render_conf() -> str:
    src = (SLURM_DIR / "slurm-multi.conf").read_text()
    host = platform.node().split(".")[0]
    out, n = re.subn(r"(?m)^MaxJobCount=\d+$", f"MaxJobCount={MAX_JOB_COUNT}", src)
    if n != 1:
        raise RuntimeError("slurm-multi.conf has no single MaxJobCount= line to raise")
    out = re.sub(r"(?m)^SlurmctldHost=vm\(", f"SlurmctldHost={host}(", out)
    out = out.replace("NodeHostname=vm ", f"NodeHostname={host} ")
    return out


def start_slurm() -> dict[str, Any]:
    if os.geteuid() != 0:
        raise SystemExit("scale_slurm.py starts slurmctld and slurmd: run it as root")
    for tool in ("slurmctld", "slurmd", "munged", "sbatch"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed: run {SLURM_DIR}/setup.sh once "
                             "(it installs Debian's slurm-wlm and munge)")
    stop_slurm()
    for d in ("state", "spool", "log", "run", "work"):
        (RUN / d).mkdir(parents=True, exist_ok=True)
    for d in ("state", "spool", "log"):
        for p in (RUN / d).iterdir():
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    CONF.write_text(render_conf())
    (RUN / "profile").write_text("multi (scale_slurm.py: MaxJobCount raised)\n")
    Path("/etc/slurm").mkdir(exist_ok=True)
    link = Path("/etc/slurm/slurm.conf")
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(CONF)
    # munge, as setup.sh does it: reuse a munged that runs, else start one and mark it ours.
    mpid = Path("/run/munge/munged.pid")
    running = False
    if mpid.exists() and mpid.read_text().strip():
        running = Path(f"/proc/{mpid.read_text().strip()}").exists()
    if not running:
        Path("/run/munge").mkdir(exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        sh(["runuser", "-u", "munge", "--", "/usr/sbin/munged", "--num-threads", "2"])
        for _ in range(50):
            if mpid.exists() and mpid.read_text().strip():
                break
            time.sleep(0.1)
        shutil.copy(mpid, RUN / "run" / "munged.pid")
    sh(["/usr/sbin/slurmctld", "-f", str(CONF), "-i"])
    for _ in range(100):
        if "is UP" in sh(["scontrol", "ping"], check=False).stdout:
            break
        time.sleep(0.1)
    else:
        raise RuntimeError(f"slurmctld did not answer: see {RUN}/log/slurmctld.log")
    names = sh(["scontrol", "show", "hostnames", "n[1-4]"]).stdout.split()
    for n in names:
        (RUN / "spool" / n).mkdir(parents=True, exist_ok=True)
        sh(["/usr/sbin/slurmd", "-f", str(CONF), "-N", n])
    for _ in range(300):
        idle = set(sh(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"], check=False)
                   .stdout.split())
        if len(idle) >= len(names):
            break
        time.sleep(0.1)
    else:
        raise RuntimeError(f"the nodes did not all go idle: see {RUN}/log")
    cfg = sh(["scontrol", "show", "config"]).stdout
    max_jobs = re.search(r"MaxJobCount\s*=\s*(\d+)", cfg)
    return {"nodes": len(names), "cpus": 16 * len(names),
            "max_job_count": int(max_jobs.group(1)) if max_jobs else None,
            "slurmctld_pid": int((RUN / "run" / "slurmctld.pid").read_text().strip())}


FAST_STOP = 20000


def stop_slurm(left: int = 0) -> None:
    pid_file = RUN / "run" / "slurmctld.pid"
    if left > FAST_STOP and pid_file.exists():
        pid = int(pid_file.read_text().strip() or 0)
        if pid and Path(f"/proc/{pid}/comm").exists() and \
                Path(f"/proc/{pid}/comm").read_text().strip() == "slurmctld":
            os.kill(pid, 15)
            for _ in range(300):
                if not Path(f"/proc/{pid}").exists():
                    break
                time.sleep(0.1)
    subprocess.run([str(SLURM_DIR / "stop.sh")], env=ENV, capture_output=True, text=True)


# ---- the phases -----------------------------------------------------------------------

def submit_all(n: int, clients: int, work: Path) -> dict[str, Any]:
    loop = work / "submit.sh"
    loop.write_text(SUBMIT_LOOP)
    shares = [n // clients + (1 if k < n % clients else 0) for k in range(clients)]
    outs = [open(work / f"submit-{k}.out", "w") for k in range(clients)]
    t0 = time.perf_counter()
    procs = [subprocess.Popen(["bash", str(loop), str(m)], env=ENV, stdout=o,
                              stderr=subprocess.STDOUT) for m, o in zip(shares, outs, strict=True)]
    for p in procs:
        p.wait()
    dt = time.perf_counter() - t0
    for o in outs:
        o.close()
    ids: list[int] = []
    lat: list[float] = []
    errors: list[str] = []
    for k in range(clients):
        for line in (work / f"submit-{k}.out").read_text().splitlines():
            parts = line.split(" ", 3)
            if parts[0] == "ERR":
                errors.append(parts[3] if len(parts) > 3 else line)
                continue
            ids.append(int(parts[0].split(";")[0]))
            lat.append(float(parts[2]) - float(parts[1]))
    return {"ids": sorted(ids), "submitted": len(ids), "errors": len(errors),
            "first_errors": errors[:3], "submit_s": dt, "submit_per_s": len(ids) / dt,
            "submit_p50_ms": pct(lat, 50) * 1000, "submit_p99_ms": pct(lat, 99) * 1000}


def timed(argv: list[str], reps: int, out: list[str] | None = None) -> dict[str, Any]:
    times: list[float] = []
    lines = 0
    for _ in range(reps):
        t0 = time.perf_counter()
        p = subprocess.run(argv, env=ENV, capture_output=True)
        times.append(time.perf_counter() - t0)
        if p.returncode != 0:
            raise RuntimeError(f"{argv} failed: {p.stderr[-300:]!r}")
        lines = p.stdout.count(b"\n")
        if out is not None:
            out.append(p.stdout.decode())
    return {"p50_ms": statistics.median(times) * 1000, "p99_ms": pct(times, 99) * 1000,
            "reps": reps, "lines": lines}


def queries(ids: list[int], sbatch_reps: int, reps: int) -> dict[str, Any]:
    """The timed calls; the held jobs the ``sbatch`` probes add are appended to ids."""
    user = pwd.getpwuid(os.getuid()).pw_name
    mid = str(ids[len(ids) // 2])
    made: list[str] = []
    sb = timed(["sbatch", "-H", "--parsable", "--wrap=true", "-o", "/dev/null", "-J",
                "probe"], sbatch_reps, made)
    ids.extend(int(x.strip().split(";")[0]) for x in made)
    return {
        "sbatch": sb,
        "squeue_j": timed(["squeue", "-h", "-j", mid, "-o", "%i %t"], max(reps, 10)),
        "squeue_u": timed(["squeue", "-h", "-u", user, "-o", "%i %t"], reps),
        "squeue_all": timed(["squeue"], reps)}


def release_all(ids: list[int]) -> float:
    t0 = time.perf_counter()
    for k in range(0, len(ids), 1000):
        sh(["scontrol", "release", ",".join(str(i) for i in ids[k:k + 1000])])
    return time.perf_counter() - t0


def queue_counts() -> tuple[int, int]:
    """(jobs squeue lists, of which pending)."""
    states = sh(["squeue", "-h", "-o", "%t"]).stdout.split()
    return len(states), sum(1 for s in states if s == "PD")


def drain(ids: list[int], ctl_pid: int, window_s: float | None) -> dict[str, Any]:
    total = len(ids)
    listed0, pending0 = queue_counts()
    c0 = cpu_s(ctl_pid)
    t0 = time.perf_counter()
    released = release_all(ids)
    samples: list[tuple[float, int, int]] = []  # (s, listed, pending)
    while True:
        listed, pending = queue_counts()
        now = time.perf_counter() - t0
        samples.append((now, listed, pending))
        if listed == 0:
            break
        if window_s is not None and now >= window_s:
            break
        if now > 3600:
            raise RuntimeError("the queue did not drain in an hour")
        time.sleep(1.0)
    dt = time.perf_counter() - t0
    c1 = cpu_s(ctl_pid)
    ended = listed0 - samples[-1][1]
    started = pending0 - samples[-1][2]

    def first(frac: float) -> float | None:
        return next((t for t, _, pd in samples if pending0 - pd >= frac * pending0), None)

    t10, t90 = first(0.1), first(0.9)
    res: dict[str, Any] = {
        "jobs": total, "listed_before": listed0, "release_s": released, "watched_s": dt,
        "complete": samples[-1][1] == 0, "ended": ended, "started": started,
        "ended_per_s": ended / dt, "started_per_s": started / dt,
        "started_per_s_10_90": (0.8 * pending0 / (t90 - t10)
                                if t10 is not None and t90 is not None and t90 > t10
                                else None),
        "ctl_cpu_ms_per_job": (c1 - c0) * 1000 / max(ended, 1),
        "samples": [[round(t, 2), a, b] for t, a, b in samples]}
    if res["complete"]:
        res["drain_s"] = dt
        res["drain_jobs_per_s"] = listed0 / dt
    return res


def state_bytes() -> int:
    return sum(p.stat().st_size for p in (RUN / "state").rglob("*") if p.is_file())


def run_point(n: int, clients: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    res: dict[str, Any] = {"jobs": n, "clients": clients, "loadavg": loadavg()}
    info = start_slurm()
    res.update({k: v for k, v in info.items() if k != "slurmctld_pid"})
    pid = info["slurmctld_pid"]
    try:
        time.sleep(2.0)  # let the nodes' registrations and the first save settle
        rss0 = rss_kb(pid)
        c0 = cpu_s(pid)
        print(f"  slurmctld up (RSS {rss0 / 1024:.0f} MiB); submitting {n} held jobs with "
              f"{clients} loops ...", flush=True)
        sub = submit_all(n, clients, work)
        ids = sub.pop("ids")
        sub["ctl_cpu_ms_per_submit"] = (cpu_s(pid) - c0) * 1000 / max(len(ids), 1)
        res["submit"] = sub
        print(f"  {sub['submitted']} submitted at {sub['submit_per_s']:.0f}/s "
              f"({sub['errors']} errors); queries ...", flush=True)
        time.sleep(2.0)
        rss1 = rss_kb(pid)
        res["rss_before_kb"], res["rss_pending_kb"] = rss0, rss1
        res["rss_per_pending_kb"] = (rss1 - rss0) / max(len(ids), 1)
        res["pending"] = queue_counts()[1]
        res["state_bytes"] = state_bytes()
        res["queries"] = queries(ids, args.sbatch_reps, args.reps)
        res["rss_after_queries_kb"] = rss_kb(pid)
        res["loadavg_after_queries"] = loadavg()
        q = res["queries"]
        print(f"  sbatch p50 {q['sbatch']['p50_ms']:.1f} ms, squeue -j/-u/all "
              f"{q['squeue_j']['p50_ms']:.1f}/{q['squeue_u']['p50_ms']:.0f}/"
              f"{q['squeue_all']['p50_ms']:.0f} ms; RSS {rss1 / 1024:.0f} MiB", flush=True)
        window = None if n <= args.drain_max else float(args.partial_drain_s)
        if window is None or window > 0:
            print("  release all, drain" + ("" if window is None else
                                            f" (watched {window:.0f} s)") + " ...", flush=True)
            res["drain"] = drain(ids, pid, window)
    finally:
        d = res.get("drain")
        stop_slurm(left=n if d is None else d["samples"][-1][1])
    return res


# ---- the report -----------------------------------------------------------------------

def render_md(res: dict[str, Any]) -> str:
    lines = [
        "# Scale on Slurm 22.05: sbatch/squeue latency, slurmctld RSS, drain with a deep "
        "queue",
        "",
        f"Run {res['when']} on {res['host']} ({os.cpu_count()} CPUs, shared with other work; "
        f"load average at start {res['load']}, at the end {res.get('load_end', '?')}). "
        f"Command: `{res['command'].strip()}`. Slurm {res.get('slurm_version', '?')} (Debian), "
        "profile `multi` of `shared/bench/slurm` (4 node names × 16 CPUs, one slurmd each, "
        f"on this host) with `MaxJobCount={MAX_JOB_COUNT}`; `sched/backfill`, "
        "`select/cons_tres`, no accounting; a fresh cluster per row. Jobs: `sbatch -H "
        "--wrap=true -o /dev/null`, each a new `sbatch` process, submitted by C concurrent "
        "shell loops. slurmctld, slurmd, the submitting loops and the queries share this "
        "machine's CPUs.",
        "",
        "| nodes × jobs, clients | submit /s | submit p50 / p99 (ms) | sbatch with N pending "
        "p50 / p99 (ms) | squeue -j / -u / all (ms) | RSS pending (MiB), per job (KB) | "
        "state (MB) | drain (jobs/s) | started /s (10-90%) | CPU ms/job ctl (submit / drain) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["points"]:
        s, q = r["submit"], r["queries"]
        d = r.get("drain")
        if d is None:
            drain_cell, sps, dcpu = "not run", "—", "—"
        elif d["complete"]:
            drain_cell = f"{d['drain_jobs_per_s']:.1f}"
            sps = ("—" if d["started_per_s_10_90"] is None
                   else f"{d['started_per_s_10_90']:.1f}")
            dcpu = f"{d['ctl_cpu_ms_per_job']:.2f}"
        else:
            drain_cell = (f"not to the end: {d['ended']} ended in {d['watched_s']:.0f} s "
                          f"({d['ended_per_s']:.1f}/s)")
            sps = f"{d['started_per_s']:.1f} (window)"
            dcpu = f"{d['ctl_cpu_ms_per_job']:.2f}"
        lines.append(
            f"| {r['nodes']} × {r['jobs']}, {r['clients']} | {s['submit_per_s']:.0f} | "
            f"{s['submit_p50_ms']:.1f} / {s['submit_p99_ms']:.1f} | "
            f"{q['sbatch']['p50_ms']:.1f} / {q['sbatch']['p99_ms']:.1f} | "
            f"{q['squeue_j']['p50_ms']:.1f} / {q['squeue_u']['p50_ms']:.0f} / "
            f"{q['squeue_all']['p50_ms']:.0f} | {r['rss_pending_kb'] / 1024:.0f}, "
            f"{r['rss_per_pending_kb']:.1f} | {r['state_bytes'] / 1e6:.1f} | {drain_cell} | "
            f"{sps} | {s['ctl_cpu_ms_per_submit']:.2f} / {dcpu} |")
    lines += [
        "",
        "Columns: *submit* is one `sbatch` process per job during the bulk submit (C loops "
        "at once); *sbatch with N pending* is ~20 more calls one after another once N are "
        "pending; *squeue* columns are p50 of new processes (`-j ID` and `-u USER` with "
        "`-h -o '%i %t'`; every job is the bench user's, so `-u` prints all N); *RSS per "
        "job* is slurmctld's VmRSS growth over the submits divided by N; *state* is the "
        "size of StateSaveLocation (Slurm's counterpart of Corral's database); *drain* is "
        "N / (release of all + time until `squeue` prints nothing, polled each second); "
        "*started /s* is between 10 % and 90 % of the jobs started.",
    ]
    for r in res["points"]:
        s = r["submit"]
        if s["errors"]:
            lines += ["", f"{r['jobs']} jobs: {s['errors']} sbatch calls failed, e.g. "
                      f"{s['first_errors'][:1]}."]
    if res.get("notes"):
        lines += ["", str(res["notes"]).strip()]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", default="10000,100000", help="comma-separated N pending")
    ap.add_argument("--clients", type=int, default=4, help="concurrent submitting loops")
    ap.add_argument("--reps", type=int, default=5, help="calls per squeue row (-j: ≥ 10)")
    ap.add_argument("--sbatch-reps", type=int, default=20)
    ap.add_argument("--drain-max", type=int, default=10000,
                    help="drain to the end only up to this N")
    ap.add_argument("--partial-drain-s", type=int, default=60,
                    help="above --drain-max, watch the drain this long (0: skip)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--notes", type=Path, default=None)
    ap.add_argument("--render", type=Path, default=None)
    args = ap.parse_args()
    if args.render is not None:
        res0 = json.loads(args.render.read_text())
        if args.notes is not None:
            res0["notes"] = args.notes.read_text()
        (args.out / "scale_slurm.json").write_text(json.dumps(res0, indent=2) + "\n")
        (args.out / "scale_slurm.md").write_text(render_md(res0))
        print(render_md(res0))
        return
    ver = subprocess.run(["sbatch", "--version"], capture_output=True, text=True).stdout
    res: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(),
        "cpus": os.cpu_count(), "load": loadavg(), "slurm_version": ver.split()[-1] if ver
        else None, "command": "python3 bench/scale_slurm.py " + " ".join(sys.argv[1:]),
        "max_job_count": MAX_JOB_COUNT, "points": []}
    work = Path(tempfile.mkdtemp(prefix="scale-slurm-"))
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        for n in (int(x) for x in args.jobs.split(",")):
            print(f"point: {n} pending, {args.clients} submitting loops", flush=True)
            res["points"].append(run_point(n, args.clients, args, work))
            (args.out / "scale_slurm.json").write_text(json.dumps(res, indent=2) + "\n")
    finally:
        stop_slurm()
        shutil.rmtree(work, ignore_errors=True)
    res["load_end"] = loadavg()
    if args.notes is not None:
        res["notes"] = args.notes.read_text()
    (args.out / "scale_slurm.json").write_text(json.dumps(res, indent=2) + "\n")
    md = render_md(res)
    (args.out / "scale_slurm.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
