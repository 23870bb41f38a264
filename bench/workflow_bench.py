"""Workflow tools' load on the scheduler: pollers while jobs drain, Corral beside Slurm 22.05.

Sections (issue 20):

a) drain under pollers: N trivial jobs submitted by a shell loop of ``sbatch`` calls, first
   submit -> queue empty (jobs/s), once without pollers and once with 8 polling processes
   running the real commands in loops, a fresh process per call as tools run them:
   3 x ``squeue -u $USER``, 3 x ``squeue -j <100 ids>``, 2 x ``sacct -j <100 ids>`` (the
   ids: 100 finished jobs of an earlier "workflow step"). Reported: the drain rate with and
   without, its drop, and each poll kind's p50/p99 latency.
b) status queries through the API: T client processes with one keep-alive connection
   each send ``POST /jobs/query {"ids": [10 ids]}`` as fast as they can for S seconds:
   queries/s and latency p50/p99 (Corral only: Slurm has no comparable API here). Once
   through ``corral.client`` (what a Python tool uses) and once from a lean load
   generator (a raw socket, as ``wrk`` sends): on 2 cores the Python client's own CPU is
   most of what limits the first, so the second measures the controller.
c) event delivery: a follower of ``GET /api/v1/events`` during drain (a): receive time -
   the event's commit-side timestamp, p50/p99 (Corral only: Slurm has no event stream).
d) a 100,000-task array (``--array=0-99999%10``) accepted as one request: the submit's
   time and the controller's memory before and after; Slurm's reference config has
   ``MaxArraySize=4001``, so its figure is for a 4,000-task array.

Slurm runs from ``shared/bench/slurm`` (profile ``acct``: slurmctld + slurmd + slurmdbd on
MariaDB, so ``sacct`` works) only when no other slurmctld runs on the machine (those
scripts use fixed paths and ports); otherwise its figures are marked skipped. Both see a
node of 64 CPUs. ``--poller-user NAME`` runs the pollers as that ordinary user (as workflow
tools run): Corral's per-user rate limit then applies to them, and the refusals are
reported from the controller's metrics; without it they run as root, which no limit
touches. Run: ``.venv/bin/python bench/workflow_bench.py [--no-slurm] [--n 2000]
[--poller-user corraltest]``.
Results: ``bench/results/workflow_bench.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SLURM_DIR = next((d for d in (ROOT.parent / "shared" / "bench" / "slurm",
                              ROOT.parent.parent / "shared" / "bench" / "slurm")
                  if d.is_dir()), ROOT.parent / "shared" / "bench" / "slurm")
RESULTS = ROOT / "bench" / "results"
ENTRY = "from corral.cli.main import main; main()"
CONFIG = """
[controller]
schedule_delay_ms = 3
[[nodes]]
name = "bench"
discover = true
cpus = 64
mem_mb = 16000
[scheduler]
default_mem_per_cpu_mb = 100
max_array_size = 100001
"""
SHELL_LOOP = ('i=0; while [ "$i" -lt "$1" ]; do sbatch --wrap=true -n1 -t 1 -o /dev/null '
              '--parsable >/dev/null || exit 1; i=$((i+1)); done')


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p / 100.0
    f = int(k)
    c = min(f + 1, len(s) - 1)
    return s[f] + (s[c] - s[f]) * (k - f)


def summary_ms(xs: list[float]) -> dict[str, float]:
    return {"n": len(xs), "p50_ms": round(1000 * pct(xs, 50), 2),
            "p99_ms": round(1000 * pct(xs, 99), 2),
            "mean_ms": round(1000 * statistics.mean(xs), 2) if xs else float("nan")}


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# ---- pollers (processes running the real commands in loops) ---------------------------------

def as_user(user: str | None, env: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """subprocess arguments and environment that run a command as ``user`` (None: as
    this process)."""
    if not user:
        return {}, env
    import pwd

    pw = pwd.getpwnam(user)
    return ({"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": [], "cwd": "/tmp"},
            {**env, "USER": user, "LOGNAME": user, "HOME": "/tmp"})


def poller(argv: list[str], env: dict[str, str], stop_at: mp.Value, out: Any,
           pause_s: float, user: str | None = None) -> None:  # type: ignore[type-arg]
    times: list[float] = []
    fails = 0
    kw, env = as_user(user, env)
    while time.time() < stop_at.value:
        t0 = time.perf_counter()
        r = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           **kw)
        dt = time.perf_counter() - t0
        if r.returncode == 0:
            times.append(dt)
        else:
            fails += 1
        if pause_s:
            time.sleep(pause_s)
    out.put((argv[0] + (" -u" if "-u" in argv else " -j"), times, fails))


def poll_commands(ids: list[str], user: str) -> list[list[str]]:
    idl = ",".join(ids)
    sq_u = ["squeue", "-h", "-u", user, "-o", "%i %t"]
    sq_j = ["squeue", "-h", "-j", idl, "-t", "all", "-o", "%i %t"]
    sa_j = ["sacct", "-X", "-n", "-P", "-j", idl, "-o", "JobIDRaw,State,ExitCode"]
    return [sq_u, sq_u, sq_u, sq_j, sq_j, sq_j, sa_j, sa_j]


def drain(env: dict[str, str], n: int, empty: Any, pollers: list[list[str]] | None,
          pause_s: float, poller_user: str | None = None) -> dict[str, Any]:
    """The shell loop of ``n`` sbatch calls then the drain; with ``pollers`` running."""
    procs: list[mp.Process] = []
    q: Any = mp.Queue()
    stop_at = mp.Value("d", time.time() + 3600)
    for argv in pollers or []:
        p = mp.Process(target=poller, args=(argv, env, stop_at, q, pause_s, poller_user),
                       daemon=True)
        p.start()
        procs.append(p)
    load = loadavg()
    t0 = time.perf_counter()
    r = subprocess.run(["/bin/sh", "-c", SHELL_LOOP, "sh", str(n)], env=env,
                       capture_output=True, text=True)
    submit_s = time.perf_counter() - t0
    failed = r.stderr.strip()[-300:] if r.returncode != 0 else ""
    while not empty():
        time.sleep(0.05)
    drain_s = time.perf_counter() - t0
    stop_at.value = 0.0
    polls: dict[str, list[float]] = {}
    fails = 0
    for _ in procs:
        kind, times, f = q.get(timeout=120)
        polls.setdefault(kind, []).extend(times)
        fails += f
    for p in procs:
        p.join(30)
    out: dict[str, Any] = {}
    if failed:  # the loop stopped at a refused sbatch: what it said, not a rate
        out["sbatch_failed"] = failed
    return {**out, "n": n, "submit_s": round(submit_s, 3), "drain_s": round(drain_s, 3),
            "drain_jobs_per_s": round(n / drain_s, 2) if not failed else None,
            "loadavg": load,
            "polls": {k: summary_ms(v) for k, v in polls.items()}, "poll_failures": fails}


# ---- Corral ----------------------------------------------------------------------------------

class Corral:
    def __init__(self, root: Path, refill_rate: int | None = None) -> None:
        self.root = root
        self.sd = root / "state"
        limits = "" if refill_rate is None else (
            f"[rate_limit]\nbucket_size = {refill_rate}\nrefill_rate = {refill_rate}\n")
        (root / "corral.toml").write_text(CONFIG + limits)
        self.env = {**os.environ, "CORRAL_STATE_DIR": str(self.sd)}

    def up(self) -> None:
        r = subprocess.run([sys.executable, "-c", ENTRY, "up", "--detach", "--state-dir",
                            str(self.sd), "--config", str(self.root / "corral.toml"),
                            "--node-name", "bench"], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"corral up failed: {r.stderr}")
        bindir = self.root / "bin"
        subprocess.run([sys.executable, "-c", ENTRY, "shims", "install", str(bindir),
                        "--force"], env=self.env, check=True, capture_output=True)
        self.env["PATH"] = f"{bindir}:{self.env.get('PATH', '')}"

    def down(self) -> None:
        subprocess.run([sys.executable, "-c", ENTRY, "down", "--state-dir", str(self.sd)],
                       capture_output=True, text=True)

    def client(self) -> Any:
        from corral.client import Client

        return Client(socket_path=str(self.sd / "corral.sock"))

    def controller_pid(self) -> int:
        return int(json.loads((self.sd / "controller.json").read_text())["pid"])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def api_queries(sock: str, ids: list[int], seconds: float, out: Any) -> None:
    from corral.client import Client

    c = Client(socket_path=sock)
    times: list[float] = []
    end = time.perf_counter() + seconds
    k = 0
    while time.perf_counter() < end:
        batch = [ids[(k + i) % len(ids)] for i in range(10)]
        k += 10
        t0 = time.perf_counter()
        c.call("POST", "/jobs/query", {"ids": [str(i) for i in batch],
                                       "include_finished": True})
        times.append(time.perf_counter() - t0)
    out.put(times)


def api_queries_lean(sock: str, ids: list[int], seconds: float, out: Any) -> None:
    """The same queries from a lean load generator (as ``wrk`` would send them): one
    keep-alive connection, each request's JSON body built and sent, the reply read to its
    ``Content-Length`` and its status checked, nothing else parsed."""
    import socket

    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock)
    times: list[float] = []
    buf = b""
    end = time.perf_counter() + seconds
    k = 0
    while time.perf_counter() < end:
        body = json.dumps({"ids": [str(ids[(k + i) % len(ids)]) for i in range(10)],
                           "include_finished": True}).encode()
        k += 10
        req = (b"POST /api/v1/jobs/query HTTP/1.1\r\nHost: corral\r\n"
               b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
               % (len(body), body))
        t0 = time.perf_counter()
        s.sendall(req)
        while True:
            head_end = buf.find(b"\r\n\r\n")
            if head_end >= 0:
                head = buf[:head_end].lower()
                if not head.startswith(b"http/1.1 200"):
                    raise RuntimeError(f"query refused: {head[:80]!r}")
                at = head.find(b"content-length:")
                n = int(head[at + 15:].split(b"\r\n")[0])
                if len(buf) >= head_end + 4 + n:
                    buf = buf[head_end + 4 + n:]
                    break
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("the controller closed the connection")
            buf += chunk
        times.append(time.perf_counter() - t0)
    s.close()
    out.put(times)


def follow_events(sock: str, stop: threading.Event, lags: list[float]) -> None:
    from corral.client import Client

    c = Client(socket_path=sock)
    cursor = int(c.events_page()["next"])
    while not stop.is_set():
        page = c.events_page(cursor, wait_s=1.0)
        now = time.time()
        lags.extend(now - float(e["time"]) for e in page["events"])
        cursor = int(page["next"])


def corral_metrics(sock: Path) -> dict[str, float]:
    """The controller's ``corral_rate_*`` metrics (Prometheus text over the socket)."""
    import http.client
    import socket

    class Unix(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(str(sock))

    conn = Unix("localhost")
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    return {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines()
            if ln.startswith("corral_rate_")}


def corral_run(n: int, work: Path, pause_s: float, api_s: float,
               api_procs: int, poller_user: str | None = None,
               refill_rate: int | None = None) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="corral-wf-", dir=work))
    os.chmod(root, 0o755)  # the pollers' user reaches the socket
    cl = Corral(root, refill_rate)
    cl.up()
    res: dict[str, Any] = {}
    try:
        c = cl.client()
        user = os.environ.get("USER") or "root"
        # the workflow's earlier step: 100 finished jobs the pollers ask about
        first = [c.submit({"spec": {"name": "step1", "time_limit_s": 60}, "argv": ["true"],
                           "workdir": str(root)})[0] for _ in range(100)]
        while c.ping()["jobs_active"]:
            time.sleep(0.05)
        ids = [str(i) for i in first]

        def empty() -> bool:
            return not c.ping()["jobs_active"]

        res["drain_alone"] = drain(cl.env, n, empty, None, pause_s)
        lags: list[float] = []
        stop = threading.Event()
        follower = threading.Thread(target=follow_events, args=(str(cl.sd / "corral.sock"),
                                                                stop, lags), daemon=True)
        follower.start()
        res["drain_polled"] = drain(cl.env, n, empty, poll_commands(ids, user), pause_s,
                                    poller_user)
        res["drain_polled"]["rate_limit"] = corral_metrics(cl.sd / "corral.sock")
        stop.set()
        follower.join(10)
        res["event_delivery"] = summary_ms(lags)
        # b) API status queries: through the Python client, then a lean load generator
        for key, target in (("api_queries", api_queries), ("api_queries_lean",
                                                            api_queries_lean)):
            q: Any = mp.Queue()
            procs = [mp.Process(target=target, args=(str(cl.sd / "corral.sock"), first,
                                                     api_s, q)) for _ in range(api_procs)]
            for p in procs:
                p.start()
            times: list[float] = []
            for _ in procs:
                times.extend(q.get(timeout=120))
            for p in procs:
                p.join(30)
            res[key] = {"processes": api_procs, "seconds": api_s, "loadavg": loadavg(),
                        "queries_per_s": round(len(times) / api_s, 1), **summary_ms(times)}
        # d) the 100,000-task array
        pid = cl.controller_pid()
        before = rss_mb(pid)
        t0 = time.perf_counter()
        aid = c.submit({"spec": {"name": "big", "time_limit_s": 60}, "argv": ["true"],
                        "workdir": str(root), "array": "0-99999%10", "hold": True})[0]
        res["array_100k"] = {"submit_s": round(time.perf_counter() - t0, 3),
                             "controller_rss_mb_before": round(before, 1),
                             "controller_rss_mb_after": round(rss_mb(pid), 1),
                             "pending_records": c.ping()["pending"]}
        c.cancel([aid])
        c.close()
    finally:
        cl.down()
        shutil.rmtree(root, ignore_errors=True)
    res["drain_drop_pct"] = drop(res)
    return res


# ---- Slurm -----------------------------------------------------------------------------------

def slurm_run(n: int, pause_s: float, poller_user: str | None = None) -> dict[str, Any]:
    if subprocess.run(["pgrep", "-x", "slurmctld"], capture_output=True).returncode == 0:
        return {"skipped": "another slurmctld runs on this machine (the shared scripts use "
                           "fixed paths and ports)"}
    r = subprocess.run([str(SLURM_DIR / "setup.sh"), "acct"], capture_output=True, text=True)
    if r.returncode != 0:
        return {"skipped": f"setup failed: {r.stderr[-500:]}"}
    env = {**os.environ, "SLURM_CONF": "/var/tmp/slurm-anchor/slurm.conf",
           "PATH": f"/usr/bin:{os.environ.get('PATH', '')}"}
    res: dict[str, Any] = {}
    try:
        out = subprocess.run(["/bin/sh", "-c", "for i in $(seq 100); do sbatch --parsable "
                              "--wrap=true -o /dev/null; done"], env=env,
                             capture_output=True, text=True, check=True).stdout
        ids = out.split()

        def empty() -> bool:
            return not subprocess.run(["squeue", "-h", "-o", "%i"], env=env,
                                      capture_output=True, text=True).stdout.strip()
        while not empty():
            time.sleep(0.2)
        user = os.environ.get("USER") or "root"
        res["drain_alone"] = drain(env, n, empty, None, pause_s)
        res["drain_polled"] = drain(env, n, empty, poll_commands(ids, user), pause_s,
                                    poller_user)
        t0 = time.perf_counter()
        aid = subprocess.run(["sbatch", "--parsable", "--hold", "--array=0-3999%10",
                              "--wrap=true", "-o", "/dev/null"], env=env, capture_output=True,
                             text=True, check=True).stdout.strip()
        res["array_4000_submit_s"] = round(time.perf_counter() - t0, 3)
        subprocess.run(["scancel", aid], env=env, capture_output=True)
    finally:
        subprocess.run([str(SLURM_DIR / "stop.sh")], capture_output=True, text=True)
    res["drain_drop_pct"] = drop(res)
    return res


def drop(res: dict[str, Any]) -> float | None:
    a = res["drain_alone"]["drain_jobs_per_s"]
    b = res["drain_polled"]["drain_jobs_per_s"]
    return None if not a or b is None else round(100 * (1 - b / a), 1)


# ---- report ----------------------------------------------------------------------------------

def limit_words(refill_rate: int | None) -> str:
    if not refill_rate:
        return "the shipped 500 burst, 200 per second"
    return f"{refill_rate} burst, {refill_rate} per second"


def render_md(res: dict[str, Any]) -> str:
    co, sl = res["corral"], res.get("slurm") or {}
    lines = [f"# Workflow-tool load (issue 20), {res['date']}", "",
             f"Command: `{res['command']}`. Machine: {res['machine']}; load average at "
             f"start {res['loadavg']}. N = {res['n']} jobs per drain (submitted by "
             f"root); pollers pause {res['pause_s']} s between calls and run as "
             f"{res.get('poller_user') or 'root'}"
             f"{' (not rate-limited: root is exempt)' if not res.get('poller_user') else ''}; "
             f"Corral's rate limit: {limit_words(res.get('refill_rate'))}.",
             ""]
    if "skipped" in sl:
        lines += [f"Slurm: skipped ({sl['skipped']}).", ""]
    lines += ["| figure | Corral | Slurm 22.05 |", "|---|---|---|"]

    def g(d: dict[str, Any], *keys: str) -> str:
        for k in keys:
            if not isinstance(d, dict) or k not in d:
                return "-"
            d = d[k]
        return str(d)
    lines.append(f"| drain alone (jobs/s) | {g(co, 'drain_alone', 'drain_jobs_per_s')} | "
                 f"{g(sl, 'drain_alone', 'drain_jobs_per_s')} |")
    lines.append(f"| drain with 8 pollers (jobs/s) | "
                 f"{g(co, 'drain_polled', 'drain_jobs_per_s')} | "
                 f"{g(sl, 'drain_polled', 'drain_jobs_per_s')} |")
    lines.append(f"| drain drop | {g(co, 'drain_drop_pct')} % | {g(sl, 'drain_drop_pct')} % |")
    for name, d in (("Corral", co), ("Slurm", sl)):
        if isinstance(d, dict) and "sbatch_failed" in d.get("drain_polled", {}):
            lines.append(f"| {name}: the sbatch loop under the pollers stopped | "
                         f"{d['drain_polled']['sbatch_failed']!r} | |")
    for kind in ("squeue -u", "squeue -j", "sacct -j"):
        lines.append(f"| `{kind}` poll p50 / p99 (ms) | "
                     f"{g(co, 'drain_polled', 'polls', kind, 'p50_ms')} / "
                     f"{g(co, 'drain_polled', 'polls', kind, 'p99_ms')} | "
                     f"{g(sl, 'drain_polled', 'polls', kind, 'p50_ms')} / "
                     f"{g(sl, 'drain_polled', 'polls', kind, 'p99_ms')} |")
        lines.append(f"| `{kind}` polls made | {g(co, 'drain_polled', 'polls', kind, 'n')} | "
                     f"{g(sl, 'drain_polled', 'polls', kind, 'n')} |")
    rl = co.get("drain_polled", {}).get("rate_limit") or {}
    if rl:
        lines.append(f"| Corral: pollers' requests refused by the rate limit (429, the launcher "
                     f"waits and retries) / let through | "
                     f"{int(rl.get('corral_rate_limited_requests', 0))} / "
                     f"{int(rl.get('corral_rate_checked_requests', 0))} | - (22.05 has no "
                     f"rate limit) |")
    a = co.get("api_queries", {})
    lines.append(f"| API status queries/s ({a.get('processes')} `corral.client` processes), "
                 f"p50 / p99 (ms) | "
                 f"{a.get('queries_per_s')}, {a.get('p50_ms')} / {a.get('p99_ms')} | - |")
    a = co.get("api_queries_lean", {})
    if a:
        lines.append(f"| API status queries/s ({a.get('processes')} lean load generators), "
                     f"p50 / p99 (ms) | "
                     f"{a.get('queries_per_s')}, {a.get('p50_ms')} / {a.get('p99_ms')} | - |")
    e = co.get("event_delivery", {})
    lines.append(f"| event delivery p50 / p99 (ms), {e.get('n')} events | "
                 f"{e.get('p50_ms')} / {e.get('p99_ms')} | - (no event stream) |")
    b = co.get("array_100k", {})
    lines.append(f"| 100,000-task array submit (s) | {b.get('submit_s')} | "
                 f"{g(sl, 'array_4000_submit_s')} (4,000 tasks: MaxArraySize=4001) |")
    lines.append(f"| controller RSS before / after the array (MB) | "
                 f"{b.get('controller_rss_mb_before')} / {b.get('controller_rss_mb_after')} "
                 f"({b.get('pending_records')} pending records) | - |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--pause-s", type=float, default=0.0, help="pollers' pause per call")
    ap.add_argument("--api-s", type=float, default=5.0)
    ap.add_argument("--api-procs", type=int, default=4)
    ap.add_argument("--no-slurm", action="store_true")
    ap.add_argument("--poller-user", default=None,
                    help="run the pollers as this ordinary user (workflow tools do not run "
                         "as root; Corral's per-user rate limit then applies to them)")
    ap.add_argument("--refill-rate", type=int, default=None,
                    help="Corral's [rate_limit] bucket_size and refill_rate per second "
                         "(default: the shipped 500 and 200)")
    ap.add_argument("--out", default=str(RESULTS / "workflow_bench"))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="wfbench-"))
    os.chmod(work, 0o755)
    res: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python " + " ".join(["bench/workflow_bench.py", *sys.argv[1:]]),
        "machine": f"{platform.node()}, {os.cpu_count()} CPUs, {platform.python_version()}",
        "loadavg": loadavg(), "n": args.n, "pause_s": args.pause_s,
        "poller_user": args.poller_user, "refill_rate": args.refill_rate}
    def save() -> None:  # after each system: a failure later keeps what was measured
        res["bench_rusage_maxrss_mb"] = round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        Path(args.out + ".json").write_text(json.dumps(res, indent=2) + "\n")
        Path(args.out + ".md").write_text(render_md(res))

    try:
        res["corral"] = corral_run(args.n, work, args.pause_s, args.api_s, args.api_procs,
                                   args.poller_user, args.refill_rate)
        res["slurm"] = {"skipped": "not run yet"}
        save()
        try:
            res["slurm"] = {"skipped": "--no-slurm"} if args.no_slurm else \
                slurm_run(args.n, args.pause_s, args.poller_user)
        except Exception as exc:  # noqa: BLE001 - the reference failed: say how
            res["slurm"] = {"skipped": f"the Slurm run failed: {exc}"}
        save()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(render_md(res))


if __name__ == "__main__":
    main()
