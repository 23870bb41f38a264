"""High availability: failover time under load, and PostgreSQL next to SQLite.

a) failover: two controllers on one PostgreSQL database (default ``lease_s = 3``), one
   agent given both, a thread submitting short jobs (``sleep 0.2``) all the time. The
   leader is killed with SIGKILL ``--kills`` times (the killed one restarts as the
   standby); failover time = the kill -> the first job whose start the new leader
   recorded (``start_time`` after the kill). Reported p50 and max. Also checked: every
   acknowledged job completed exactly once.
b) the store: one controller + agent on SQLite, then the same on PostgreSQL, same run:
   ``--n`` trivial jobs (``true``) submitted back to back over one connection (submit
   latency p50/p99 per call) and the drain rate (first submit -> queue empty).

Slurm's backup controller is not measured here: ``shared/bench/slurm`` runs one
``slurmctld``; Slurm documents its takeover after ``SlurmctldTimeout`` (120 s default).
The PostgreSQL server is the tests' throw-away one (``tests/pg.py``: fsync off, so these
are costs of the protocol and the round trips, not of disk flushes).
Run: ``.venv/bin/python bench/ha_bench.py`` (about 2 minutes). Results:
``bench/results/ha_bench.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"

from tests.e2e.cluster import wait_for  # noqa: E402
from tests.e2e.ha import HaCluster, sh  # noqa: E402
from tests.pg import PgServer, pg_bindir  # noqa: E402


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def failover(pg: PgServer, root: Path, kills: int) -> dict[str, Any]:
    from corral.controller.leadership import DEFAULT_LEASE_S

    lease_s = DEFAULT_LEASE_S
    ha = HaCluster(root / "fo", pg.create_db("bench_failover"), n=2, lease_s=lease_s)
    acked: list[int] = []
    stop = threading.Event()
    times: list[float] = []
    try:
        ha.start()
        ha.start_agent()
        ha.wait_node_up()

        def load() -> None:
            with ha.client() as c:
                while not stop.is_set():
                    acked.extend(c.submit(sh("sleep 0.2", ha.work)))
                    time.sleep(0.02)

        t = threading.Thread(target=load, daemon=True)
        t.start()
        with ha.client() as c:
            for k in range(kills):
                wait_for(lambda: len(acked) > 5, 60)
                old = ha.leader()
                wall = time.time()
                t0 = time.monotonic()
                old.kill9()
                wait_for(lambda wall=wall: any((j.get("start_time") or 0) >= wall
                                               for j in c.jobs(include_finished=True)),
                         60, interval=0.02, what="a job started by the new leader")
                times.append(time.monotonic() - t0)
                print(f"  kill {k + 1}: {times[-1]:.2f} s", flush=True)
                old.start()
        stop.set()
        t.join(timeout=60)
        with ha.client() as c:
            def done() -> list[dict[str, Any]] | None:
                h = c.history(all_users=True)
                return h if all(j["state"] == "COMPLETED" for j in h) else None
            hist = wait_for(done, 120, interval=0.5, what="all jobs to complete")
        ids = sorted(j["id"] for j in hist)
        ok = ids == sorted(acked) and all(j["restarts"] == 0 for j in hist)
        return {"kills": kills, "lease_s": lease_s, "seconds": times,
                "p50_s": statistics.median(times), "max_s": max(times),
                "jobs": len(acked), "all_completed_once": ok}
    finally:
        stop.set()
        ha.down()


def store_run(url: str, root: Path, n: int) -> dict[str, Any]:
    ha = HaCluster(root, url, n=1)
    try:
        ha.start()
        ha.start_agent()
        ha.wait_node_up()
        lat: list[float] = []
        with ha.client(ha.ctls[0].url) as c:
            body = sh("true", ha.work)
            t_first = time.monotonic()
            for _ in range(n):
                t0 = time.perf_counter()
                c.submit(body)
                lat.append((time.perf_counter() - t0) * 1000)
            submitted = time.monotonic() - t_first

            def empty() -> bool:
                p = c.ping()
                return p["pending"] + p["running"] == 0
            wait_for(empty, 300, interval=0.05, what="the queue to drain")
            drained = time.monotonic() - t_first
        return {"n": n, "submit_p50_ms": statistics.median(lat), "submit_p99_ms": pct(lat, 99),
                "submit_rate": n / submitted, "drain_rate": n / drained}
    finally:
        ha.down()


def render(res: dict[str, Any]) -> str:
    fo, sq, pg = res["failover"], res["sqlite"], res["postgresql"]
    lines = [
        "# High availability: failover time, PostgreSQL next to SQLite (same run)",
        "",
        f"Run {res['when']} on {res['host']}. Command: `{res['command']}`.",
        "One machine (2 cores shared with other work; load average at start "
        f"{res['load']}); the PostgreSQL server runs with fsync off (tests/pg.py).",
        "",
        "| metric | value |",
        "|---|---|",
        f"| failover, kill -9 of the leader -> first job started by the new leader, p50 "
        f"({fo['kills']} kills, lease_s={fo['lease_s']}) | {fo['p50_s']:.2f} s |",
        f"| failover, max | {fo['max_s']:.2f} s |",
        f"| jobs submitted during the kills / all completed exactly once | {fo['jobs']} / "
        f"{'yes' if fo['all_completed_once'] else 'NO'} |",
        "| Slurm backup slurmctld takeover (documented default SlurmctldTimeout) | 120 s |",
        "",
        f"| store ({sq['n']} `true` jobs, one connection) | SQLite | PostgreSQL | PG / SQLite |",
        "|---|---|---|---|",
    ]
    for key, label in (("submit_p50_ms", "submit latency p50 (ms)"),
                       ("submit_p99_ms", "submit latency p99 (ms)"),
                       ("submit_rate", "submit rate (jobs/s)"),
                       ("drain_rate", "drain rate (jobs/s)")):
        lines.append(f"| {label} | {sq[key]:.2f} | {pg[key]:.2f} | {pg[key] / sq[key]:.2f}× |")
    lines += ["", "Failover seconds per kill: " + ", ".join(f"{s:.2f}" for s in fo["seconds"])]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--n", type=int, default=1000)
    args = ap.parse_args()
    bindir = pg_bindir()
    if bindir is None:
        raise SystemExit("PostgreSQL is not installed (scripts/system-deps)")
    root = Path(tempfile.mkdtemp(prefix="corral-ha-bench-"))
    os.chmod(root, 0o755)
    pg = PgServer(bindir, root / "pg")
    pg.start()
    try:
        res: dict[str, Any] = {
            "when": time.strftime("%Y-%m-%d %H:%M:%S"), "host": platform.node(),
            "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "command": "python bench/ha_bench.py " + " ".join(sys.argv[1:])}
        print("failover ...", flush=True)
        res["failover"] = failover(pg, root, args.kills)
        print("sqlite ...", flush=True)
        res["sqlite"] = store_run(f"sqlite:///{root / 'sq.db'}", root / "sq", args.n)
        print("postgresql ...", flush=True)
        res["postgresql"] = store_run(pg.create_db("bench_store"), root / "pgs", args.n)
    finally:
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ha_bench.json").write_text(json.dumps(res, indent=2) + "\n")
    md = render(res)
    (RESULTS / "ha_bench.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
