"""One controller, many nodes, a deep queue: how Corral's costs grow (issue 19 item 1).

A point is N stand-in agents (``scale_agents.py``: the real agent protocol over TCP, one
WebSocket each, all in one process, 64 CPUs each, jobs "run" for their ``sleep`` seconds
without any process) and J jobs. For each point, on a fresh controller (SQLite):

1. connect: the agents' process starts; time until the controller counts N agents;
2. queue: J single-CPU jobs submitted held (``hold``) by C concurrent clients (threads,
   one connection each, over the Unix socket): submit rate, p50/p99 latency of one call;
   then with J pending: controller RSS and RSS per pending job (over the RSS before the
   first submit), database size, and ``squeue`` latency as a user sees it (the compiled
   shim, a new process each call): ``squeue -j ID``, ``squeue -u USER`` and ``squeue``
   (every job is the bench user's: ``-u`` prints all J too);
3. restart: ``kill -9`` of the controller, a new one on the same state: time until it
   answers, until all N agents are back, and until a new job is scheduled (a probe job
   submitted once it answers is running);
4. run: every held job released; the queue drains as the stand-ins end jobs after their
   run time (1-10 s, deterministic); drain time, jobs started per second between 10% and
   90% started, scheduling cycle time p50/p99 (the controller's cycle histogram over the
   run, interpolated within buckets; the largest cycle seen by sampling ``ping``), CPU
   seconds per job of the controller and of the agents' process.

Slurm 22.05 at the same queue depths is ``bench/scale_slurm.py`` (item 2 of the issue;
``bench/results/scale_slurm.md``); the targets of item 3 are checked against these
numbers.

Run: ``.venv/bin/python bench/scale.py`` (points ``100x10000,1000x10000``; add
``--points 1000x100000`` for the deep queue; ``--clients 1,8``; ``--array-size K`` for the
same jobs as arrays of K tasks, one request each). Results:
``bench/results/scale.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import pwd
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
ENTRY = "from corral.cli.main import main; main()"
PREFIX = "s"
CPUS = 64
CONFIG = """
[controller]
listen = "127.0.0.1:{port}"
schedule_delay_ms = 3
{bound}
[scheduler]
default_mem_per_cpu_mb = 100

[[nodes]]
name = "{prefix}[0001-{last:04d}]"
cpus = {cpus}
mem_mb = 256000
"""
TARGETS = {"submit_p99_ms": 20.0, "squeue_j_ms": 50.0, "squeue_u_ms": 200.0,
           "cycle_p99_ms": 500.0, "rss_per_pending_kb": 4.0, "restart_to_schedule_s": 10.0}


CYCLE_MAX_STARTS: int | None = None  # --cycle-max-starts; None: the controller's default
GC_FREEZE_S: float | None = None  # --gc-freeze-s; None: the controller's default
ARRAY_SIZE = 0  # --array-size K: the J jobs come as J/K arrays of K tasks; 0: plain jobs


def runtime_s(i: int) -> int:
    return 1 + (i * 7919) % 10


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


_HZ = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12])) / _HZ


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def metrics_text(sock: str) -> str:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(sock)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: corral\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        b = s.recv(1 << 16)
        if not b:
            break
        data += b
    s.close()
    return data.partition(b"\r\n\r\n")[2].decode()


def cycle_buckets(text: str) -> list[tuple[float, float]]:
    """(upper bound s, cumulative count) of ``corral_scheduler_cycle_seconds``."""
    out = []
    for line in text.splitlines():
        if line.startswith("corral_scheduler_cycle_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out.append((float("inf") if le == "+Inf" else float(le), float(line.split()[-1])))
    return out


def hist_pct(before: list[tuple[float, float]], after: list[tuple[float, float]],
             p: float) -> tuple[float, int]:
    """The p-th percentile (s) of the cycles between two histogram readings, linear
    within a bucket; and how many cycles that was."""
    b = dict(before)
    cum = [(le, c - b.get(le, 0.0)) for le, c in after]
    total = cum[-1][1] if cum else 0
    if not total:
        return float("nan"), 0
    want = total * p / 100.0
    prev_le, prev_c = 0.0, 0.0
    for le, c in cum:
        if c >= want:
            if le == float("inf"):
                return prev_le, int(total)
            frac = (want - prev_c) / (c - prev_c) if c > prev_c else 1.0
            return prev_le + (le - prev_le) * frac, int(total)
        prev_le, prev_c = le, c
    return prev_le, int(total)


class Point:
    def __init__(self, work: Path, nodes: int, jobs: int, clients: int) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=f"scale-{nodes}x{jobs}-", dir=work))
        self.sd = self.root / "state"
        self.cfg = self.root / "corral.toml"
        with socket.socket() as probe:  # a fixed port: the agents reconnect to it after
            probe.bind(("127.0.0.1", 0))  # the restart
            port = probe.getsockname()[1]
        bound = "" if CYCLE_MAX_STARTS is None else f"cycle_max_starts = {CYCLE_MAX_STARTS}\n"
        if GC_FREEZE_S is not None:
            bound += f"gc_freeze_s = {GC_FREEZE_S}\n"
        self.cfg.write_text(CONFIG.format(prefix=PREFIX, last=nodes, cpus=CPUS, port=port,
                                          bound=bound))
        self.nodes, self.jobs, self.clients = nodes, jobs, clients
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_",
                                                                             "SLURM_"))}
        self.env["CORRAL_STATE_DIR"] = str(self.sd)
        self.sock = str(self.sd / "corral.sock")
        self.ctl: subprocess.Popen[bytes] | None = None
        self.agents: subprocess.Popen[bytes] | None = None
        self.bin = self.root / "bin"

    # ---- processes ------------------------------------------------------------------------
    def start_controller(self) -> float:
        info = self.sd / "controller.json"
        if info.exists():
            info.unlink()
        t0 = time.perf_counter()
        log = open(self.root / "controller.log", "ab")
        self.ctl = subprocess.Popen([sys.executable, "-c", ENTRY, "controller", "--state-dir",
                                     str(self.sd), "--config", str(self.cfg)], env=self.env,
                                    stdout=log, stderr=subprocess.STDOUT)
        log.close()
        while True:
            if self.ctl.poll() is not None:
                raise RuntimeError(f"the controller exited: see {self.root}/controller.log")
            try:
                with self.client() as c:
                    c.ping()
                return time.perf_counter() - t0
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.01)

    def url(self) -> str:
        return str(json.loads((self.sd / "controller.json").read_text())["url"])

    def start_agents(self) -> None:
        log = open(self.root / "agents.log", "ab")
        self.agents = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "scale_agents.py"), self.url(),
             str(self.sd / "cluster.key"), str(self.root / "agents"), PREFIX,
             str(self.nodes), str(CPUS)], env=self.env, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def client(self) -> Any:
        from corral.client import Client

        return Client(socket_path=self.sock, timeout_s=120)

    def wait_agents(self, timeout_s: float = 600) -> float:
        t0 = time.perf_counter()
        with self.client() as c:
            while c.ping()["agents"] < self.nodes:
                if time.perf_counter() - t0 > timeout_s:
                    raise RuntimeError(f"only {c.ping()['agents']} of {self.nodes} agents")
                time.sleep(0.02)
        return time.perf_counter() - t0

    def stop(self) -> None:
        for p in (self.agents, self.ctl):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    # ---- phases ---------------------------------------------------------------------------
    def submit_all(self) -> dict[str, Any]:
        lat: list[list[float]] = [[] for _ in range(self.clients)]
        ids: list[list[int]] = [[] for _ in range(self.clients)]
        errors: list[str] = []

        calls = self.jobs // ARRAY_SIZE if ARRAY_SIZE else self.jobs

        def worker(k: int) -> None:
            try:
                with self.client() as c:
                    for i in range(k, calls, self.clients):
                        body: dict[str, Any] = {
                            "spec": {"name": "s", "time_limit_s": 600},
                            "argv": ["sleep", str(runtime_s(i))], "workdir": "/tmp",
                            "stdout": "/dev/null", "hold": True}
                        if ARRAY_SIZE:  # one request per array; the array's id is kept
                            body["array"] = f"0-{ARRAY_SIZE - 1}"
                        a = time.perf_counter()
                        if ARRAY_SIZE:
                            ids[k].append(int(c.submit_result(body)["array_job_id"]))
                        else:
                            ids[k].extend(c.submit(body))
                        lat[k].append(time.perf_counter() - a)
            except Exception as exc:  # noqa: BLE001 - reported
                errors.append(repr(exc))

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(self.clients)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        dt = time.perf_counter() - t0
        if errors:
            raise RuntimeError(f"submits failed: {errors[:3]}")
        xs = [x for part in lat for x in part]
        self.ids = [i for part in ids for i in part]
        return {"submit_s": dt, "submit_per_s": self.jobs / dt, "submit_calls": calls,
                "submit_p50_ms": pct(xs, 50) * 1000, "submit_p99_ms": pct(xs, 99) * 1000}

    def shim(self, argv: list[str], reps: int) -> dict[str, float]:
        times = []
        lines = 0
        for _ in range(reps):
            t0 = time.perf_counter()
            p = subprocess.run([str(self.bin / argv[0]), *argv[1:]], env=self.env,
                               capture_output=True)
            times.append(time.perf_counter() - t0)
            if p.returncode != 0:
                raise RuntimeError(f"{argv} failed: {p.stderr[-300:]!r}")
            lines = p.stdout.count(b"\n")
        return {"p50_ms": statistics.median(times) * 1000, "lines": lines}

    def queries(self, reps: int) -> dict[str, Any]:
        user = pwd.getpwuid(os.getuid()).pw_name
        mid = str(self.ids[len(self.ids) // 2])
        return {"squeue_j": self.shim(["squeue", "-h", "-j", mid, "-o", "%i %t"], reps),
                "squeue_u": self.shim(["squeue", "-h", "-u", user, "-o", "%i %t"],
                                      max(3, reps // 4)),
                "squeue_all": self.shim(["squeue"], max(3, reps // 4))}

    def restart(self) -> dict[str, Any]:
        assert self.ctl is not None
        t0 = time.perf_counter()
        self.ctl.kill()
        self.ctl.wait()
        self.start_controller()
        up = time.perf_counter() - t0
        rss = rss_kb(self.ctl.pid)
        with self.client() as c:
            probe = c.submit({"spec": {"name": "probe", "time_limit_s": 60},
                              "argv": ["sleep", "0"], "workdir": "/tmp",
                              "stdout": "/dev/null"})[0]
            sched = None
            agents_s = None
            while True:
                if time.perf_counter() - t0 > 300:
                    raise RuntimeError(f"after the restart: agents back {agents_s}, probe "
                                       f"scheduled {sched} (see {self.root})")
                if agents_s is None and c.ping()["agents"] >= self.nodes:
                    agents_s = time.perf_counter() - t0
                if sched is None and c.job(probe)["state"] != "PENDING":
                    sched = time.perf_counter() - t0
                if sched is not None and agents_s is not None:
                    break
                time.sleep(0.02)
        return {"answers_s": up, "agents_back_s": agents_s, "probe_scheduled_s": sched,
                "rss_after_restart_kb": rss}

    def run(self) -> dict[str, Any]:
        assert self.ctl is not None and self.agents is not None
        h0 = cycle_buckets(metrics_text(self.sock))
        c0, a0 = cpu_s(self.ctl.pid), cpu_s(self.agents.pid)
        samples: list[tuple[float, int, float]] = []
        t0 = time.perf_counter()
        with self.client() as c:
            for k in range(0, len(self.ids), 5000):
                c.release(self.ids[k:k + 5000])
            released = time.perf_counter() - t0
            last_cycles = -1
            while True:
                p = c.ping()
                now = time.perf_counter() - t0
                if p["cycles"] != last_cycles:
                    samples.append((now, self.jobs - p["pending"], float(p["last_cycle_s"]
                                                                         or 0.0)))
                    last_cycles = p["cycles"]
                if not p["jobs_active"]:
                    break
                if now > 1800:
                    raise RuntimeError("the queue did not drain in 30 minutes")
                time.sleep(0.05)
        drain = time.perf_counter() - t0
        h1 = cycle_buckets(metrics_text(self.sock))
        c1, a1 = cpu_s(self.ctl.pid), cpu_s(self.agents.pid)
        p50, cycles = hist_pct(h0, h1, 50)
        p99, _ = hist_pct(h0, h1, 99)

        def first(frac: float) -> float:
            return next((t for t, started, _ in samples if started >= frac * self.jobs),
                        drain)

        t10, t90 = first(0.1), first(0.9)
        return {"release_s": released, "drain_s": drain, "drain_jobs_per_s": self.jobs / drain,
                "started_per_s_10_90": 0.8 * self.jobs / (t90 - t10) if t90 > t10 else None,
                "cycles": cycles, "cycle_p50_ms": p50 * 1000, "cycle_p99_ms": p99 * 1000,
                "cycle_max_seen_ms": max((s for _, _, s in samples), default=0.0) * 1000,
                "controller_cpu_ms_per_job": (c1 - c0) * 1000 / self.jobs,
                "agents_cpu_ms_per_job": (a1 - a0) * 1000 / self.jobs}

    def db_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.sd.glob("corral.db*"))


def run_point(work: Path, nodes: int, jobs: int, clients: int, reps: int) -> dict[str, Any]:
    pt = Point(work, nodes, jobs, clients)
    res: dict[str, Any] = {"nodes": nodes, "cpus_per_node": CPUS, "jobs": jobs,
                           "clients": clients,
                           "loadavg": " ".join(Path("/proc/loadavg").read_text().split()[:3])}
    try:
        pt.start_controller()
        subprocess.run([sys.executable, "-c", ENTRY, "shims", "install", str(pt.bin),
                        "--force"], env=pt.env, check=True, capture_output=True)
        pt.start_agents()
        res["agents_connect_s"] = pt.wait_agents()
        assert pt.ctl is not None
        rss0 = rss_kb(pt.ctl.pid)
        print(f"  {nodes} agents connected in {res['agents_connect_s']:.1f} s; submitting "
              f"{jobs} ...", flush=True)
        res["submit"] = pt.submit_all()
        time.sleep(1.0)  # let the last commits and cycles settle before reading RSS
        rss1 = rss_kb(pt.ctl.pid)
        res["rss_before_kb"], res["rss_pending_kb"] = rss0, rss1
        res["rss_per_pending_kb"] = (rss1 - rss0) / jobs
        res["db_bytes"] = pt.db_bytes()
        print(f"  submitted at {res['submit']['submit_per_s']:.0f}/s; queries ...", flush=True)
        res["queries"] = pt.queries(reps)
        print("  restart (kill -9) ...", flush=True)
        res["restart"] = pt.restart()
        print("  run: release all, drain ...", flush=True)
        res["run"] = pt.run()
        res["db_bytes_after"] = pt.db_bytes()
    finally:
        pt.stop()
        shutil.rmtree(pt.root, ignore_errors=True)
    return res


def verdicts(r: dict[str, Any]) -> dict[str, tuple[float, float, bool]]:
    got = {"submit_p99_ms": r["submit"]["submit_p99_ms"],
           "squeue_j_ms": r["queries"]["squeue_j"]["p50_ms"],
           "squeue_u_ms": r["queries"]["squeue_u"]["p50_ms"],
           "cycle_p99_ms": r["run"]["cycle_p99_ms"],
           "rss_per_pending_kb": r["rss_per_pending_kb"],
           "restart_to_schedule_s": r["restart"]["probe_scheduled_s"] or float("inf")}
    return {k: (v, TARGETS[k], v <= TARGETS[k]) for k, v in got.items()}


def _label(r: dict[str, Any]) -> str:
    """A row's point, with what set it apart (``label``, e.g. the cycle bound) if any."""
    text = f"{r['nodes']} × {r['jobs']}, {r['clients']}"
    return f"{text}, {r['label']}" if r.get("label") else text


def render_md(res: dict[str, Any]) -> str:
    lines = [
        "# Scale: one controller, N stand-in agents over TCP, a deep queue",
        "",
        f"Run {res['when']} on {res['host']} ({os.cpu_count()} CPUs, shared with other "
        f"work; load average at start {res['load']}). Command: `{res['command']}`. Each "
        f"node 64 CPUs; jobs of 1 CPU and 1-10 s; SQLite. The controller, the agents' "
        "process, the submitting clients and the shims all share this machine's CPUs.",
        "",
        "| nodes × jobs, clients | submit /s | submit p50 / p99 (ms) | squeue -j / -u / all "
        "(ms) | RSS pending (MiB), per job (KB) | DB (MB) | agents connect (s) | restart: "
        "answers / agents / scheduling (s) | drain (jobs/s) | started /s (10-90%) | cycle "
        "p50 / p99 / max seen (ms) | CPU ms/job ctl / agents |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["points"]:
        s, q, rs, ru = r["submit"], r["queries"], r["restart"], r["run"]
        sps = ru.get("started_per_s_10_90")
        lines.append(
            f"| {_label(r)} | {s['submit_per_s']:.0f} | "
            f"{s['submit_p50_ms']:.1f} / {s['submit_p99_ms']:.1f} | "
            f"{q['squeue_j']['p50_ms']:.1f} / {q['squeue_u']['p50_ms']:.0f} / "
            f"{q['squeue_all']['p50_ms']:.0f} | {r['rss_pending_kb'] / 1024:.0f}, "
            f"{r['rss_per_pending_kb']:.1f} | {r['db_bytes'] / 1e6:.1f} | "
            f"{r['agents_connect_s']:.1f} | {rs['answers_s']:.1f} / "
            f"{rs['agents_back_s'] or float('nan'):.1f} / "
            f"{rs['probe_scheduled_s'] or float('nan'):.1f} | "
            f"{ru['drain_jobs_per_s']:.0f} | {'—' if sps is None else f'{sps:.0f}'} | "
            f"{ru['cycle_p50_ms']:.1f} / {ru['cycle_p99_ms']:.0f} / "
            f"{ru['cycle_max_seen_ms']:.0f} | {ru['controller_cpu_ms_per_job']:.2f} / "
            f"{ru['agents_cpu_ms_per_job']:.2f} |")
    lines += ["", "Targets of issue 19 item 3 (set for 1,000 nodes × 100,000 pending), "
              "checked at each point measured:", "",
              "| point | " + " | ".join(TARGETS) + " |",
              "|---|" + "---|" * len(TARGETS)]
    for r in res["points"]:
        v = verdicts(r)
        cells = [f"{got:.1f} ≤ {want:g}: {'met' if ok else '**missed**'}"
                 for got, want, ok in v.values()]
        lines.append(f"| {_label(r)} | " + " | ".join(cells)
                     + " |")
    if res.get("notes"):
        lines += ["", str(res["notes"]).strip()]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", default="100x10000,1000x10000",
                    help="comma-separated NODESxJOBS")
    ap.add_argument("--clients", default="1", help="comma-separated client counts")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--notes", type=Path, default=None)
    ap.add_argument("--render", type=Path, default=None)
    ap.add_argument("--cycle-max-starts", type=int, default=None,
                    help="[controller] cycle_max_starts (default: the controller's, 1000)")
    ap.add_argument("--array-size", type=int, default=0,
                    help="submit the jobs as arrays of this many tasks (0: plain jobs)")
    ap.add_argument("--gc-freeze-s", type=float, default=None,
                    help="[controller] gc_freeze_s (default: the controller's; 0: off)")
    args = ap.parse_args()
    global CYCLE_MAX_STARTS, GC_FREEZE_S, ARRAY_SIZE
    CYCLE_MAX_STARTS = args.cycle_max_starts
    GC_FREEZE_S = args.gc_freeze_s
    ARRAY_SIZE = args.array_size
    if args.render is not None:
        res0 = json.loads(args.render.read_text())
        if args.notes is not None:
            res0["notes"] = args.notes.read_text()
        (args.out / "scale.json").write_text(json.dumps(res0, indent=2) + "\n")
        (args.out / "scale.md").write_text(render_md(res0))
        print(render_md(res0))
        return
    work = Path(tempfile.mkdtemp(prefix="corral-scale-"))
    res: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(),
        "load": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
        "command": "python bench/scale.py " + " ".join(sys.argv[1:]), "points": []}
    try:
        for spec in args.points.split(","):
            n, j = (int(x) for x in spec.lower().split("x"))
            for k in (int(x) for x in args.clients.split(",")):
                print(f"point {n} nodes × {j} jobs, {k} client(s)", flush=True)
                res["points"].append(run_point(work, n, j, k, args.reps))
                labels = ([f"cycle_max_starts {CYCLE_MAX_STARTS}"] if CYCLE_MAX_STARTS
                          is not None else []) + ([f"gc_freeze_s {GC_FREEZE_S:g}"]
                                                  if GC_FREEZE_S is not None else []) + (
                    [f"arrays of {ARRAY_SIZE}"] if ARRAY_SIZE else [])
                if labels:
                    res["points"][-1]["label"] = ", ".join(labels)
                args.out.mkdir(parents=True, exist_ok=True)
                (args.out / "scale.json").write_text(json.dumps(res, indent=2) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.notes is not None:
        res["notes"] = args.notes.read_text()
    (args.out / "scale.json").write_text(json.dumps(res, indent=2) + "\n")
    md = render_md(res)
    (args.out / "scale.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
