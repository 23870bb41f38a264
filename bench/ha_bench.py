"""High availability: failover time under load, a warm standby, Slurm's backup
controller, and PostgreSQL next to SQLite, all in one run.

a) failover: two controllers on one PostgreSQL database (default ``lease_s = 3``), one
   agent given both, a thread submitting short jobs (``sleep 0.2``) all the time. The
   leader is killed with SIGKILL ``--kills`` times, spread over a ``--load``-job submit
   load (the killed one restarts as the standby; each kill waits for the standby's warm
   copy); failover time = the kill -> the first job whose start the new leader recorded
   (``start_time`` after the kill). Reported p50 and max; every acknowledged job
   completed exactly once.
b) a large table: ``--large`` held pending jobs written to the database, then kill -9 of
   the leader with a warm standby (``standby_refresh_s = 2``) and with a cold one (0):
   kill -> the new leader serves, -> its first job started, and its own state load.
c) Slurm 22.05's backup slurmctld (``bench/slurm_ha.py``), killed the same way under a
   submit load, with ``SlurmctldTimeout = --slurm-timeout`` and once with the default
   (120 s); reported as not measured, with the reason, where Slurm cannot run.
d) the store: one controller + agent on SQLite, then the same on PostgreSQL: ``--n``
   trivial jobs (``true``) submitted back to back over one connection (submit latency
   p50/p99 per call) and the drain rate (first submit -> queue empty).

The PostgreSQL server is the tests' throw-away one (``tests/pg.py``: fsync off, so these
are costs of the protocol and the round trips, not of disk flushes).
Run: ``.venv/bin/python bench/ha_bench.py --large 20000 --large-kills 2`` (about 13
minutes, root for Slurm). Results: ``bench/results/ha_bench.{json,md}``.
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
from tests.e2e.ha import HaCluster, fill_held, sh  # noqa: E402
from tests.pg import PgServer, pg_bindir  # noqa: E402


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def failover(pg: PgServer, root: Path, kills: int, load_jobs: int) -> dict[str, Any]:
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
                at = load_jobs * (k + 1) // (kills + 1)  # kills spread over the load
                wait_for(lambda at=at: len(acked) >= at, 600)
                old = ha.leader()
                for other in ha.ctls:
                    if other is not old:
                        wait_for(lambda o=other: ((o.ping() or {}).get("warm") or {})
                                 .get("ready"), 60, what="a warm standby")
                wall = time.time()
                t0 = time.monotonic()
                old.kill9()
                wait_for(lambda wall=wall: any((j.get("start_time") or 0) >= wall
                                               for j in c.jobs(include_finished=True)),
                         60, interval=0.02, what="a job started by the new leader")
                times.append(time.monotonic() - t0)
                print(f"  kill {k + 1}: {times[-1]:.2f} s", flush=True)
                old.start()
            wait_for(lambda: len(acked) >= load_jobs, 600, what="the rest of the load")
        stop.set()
        t.join(timeout=60)
        with ha.client() as c:
            def done() -> list[dict[str, Any]] | None:
                h = c.history(all_users=True)
                return h if all(j["state"] == "COMPLETED" for j in h) else None
            hist = wait_for(done, 120, interval=0.5, what="all jobs to complete")
        ids = sorted(j["id"] for j in hist)
        ok = ids == sorted(acked) and all(j["restarts"] == 0 for j in hist)
        return {"kills": kills, "lease_s": lease_s, "seconds": times, "load_jobs": load_jobs,
                "p50_s": statistics.median(times), "max_s": max(times),
                "jobs": len(acked), "all_completed_once": ok}
    finally:
        stop.set()
        ha.down()


def large_takeover(pg: PgServer, root: Path, n_active: int, refresh_s: float,
                   kills: int) -> dict[str, Any]:
    """Takeover with ``n_active`` held pending jobs in the table, warm or cold standby:
    kill -9 -> the new leader serves (its state loaded), and -> its first job started;
    the new leader's own load time (``recovered ... (warm|cold, X s)`` in its log)."""
    import re

    from corral.controller.leadership import DEFAULT_LEASE_S

    kind = "warm" if refresh_s > 0 else "cold"
    url = pg.create_db(f"bench_large_{kind}")
    ha = HaCluster(root / f"large-{kind}", url, n=2, lease_s=DEFAULT_LEASE_S,
                   refresh_s=refresh_s)
    serve: list[float] = []
    first: list[float] = []
    loads: list[float] = []
    try:
        ha.start()
        ha.start_agent()
        ha.wait_node_up()
        with ha.client() as c:
            held = c.submit_result(dict(sh("true", ha.work), hold=True))["job_ids"][0]
            assert held == 1, held
            fill_held(url, n_active, 10_000_000)
            for _k in range(kills):
                old = ha.leader()
                standby = next(x for x in ha.ctls if x is not old)
                if refresh_s > 0:
                    wait_for(lambda s=standby: (((s.ping() or {}).get("warm") or {})
                                      .get("active_jobs") or 0) >= n_active, 600,
                             interval=0.2, what="the standby's warm copy")
                t0 = time.monotonic()
                old.kill9()
                wait_for(lambda s=standby: s.role() == "leader", 600, interval=0.02,
                         what="the standby to lead")
                serve.append(time.monotonic() - t0)
                jid = c.submit(sh("true", ha.work))[0]
                wait_for(lambda jid=jid: c.job(jid).get("start_time"), 600, interval=0.05,
                         what="a job started by the new leader")
                first.append(time.monotonic() - t0)
                m = re.findall(r"recovered \d+ pending and \d+ running jobs \((\w+), "
                               r"([\d.]+) s\)", standby.log())
                loads.append(float(m[-1][1]) if m else float("nan"))
                old.start()
    except BaseException:
        print(ha.logs(), flush=True)
        raise
    finally:
        ha.down()
    return {"standby": kind, "active_jobs": n_active + 1, "kills": kills,
            "serve_s": serve, "first_job_s": first, "load_s": loads,
            "serve_p50_s": statistics.median(serve), "first_job_p50_s": statistics.median(first),
            "load_p50_s": statistics.median(loads)}


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
        "# High availability: failover time, warm standby, Slurm's backup, PostgreSQL next "
        "to SQLite (same run)",
        "",
        f"Run {res['when']} on {res['host']}. Command: `{res['command']}`.",
        "One machine (2 cores shared with other work; load average at start "
        f"{res['load']}, at the end {res['load_end']}); the PostgreSQL server runs with "
        "fsync off (tests/pg.py).",
        "",
        "| metric | value |",
        "|---|---|",
        f"| Corral failover, kill -9 of the leader -> first job started by the new leader, "
        f"p50 ({fo['kills']} kills spread over a {fo['load_jobs']}-job submit load, "
        f"lease_s={fo['lease_s']}) | {fo['p50_s']:.2f} s |",
        f"| Corral failover, max | {fo['max_s']:.2f} s |",
        f"| jobs submitted during the kills / all completed exactly once | {fo['jobs']} / "
        f"{'yes' if fo['all_completed_once'] else 'NO'} |",
    ]
    for sl in res.get("slurm", []):
        if "error" in sl:
            lines.append(f"| Slurm backup slurmctld takeover | not measured: {sl['error']} |")
            continue
        secs = sl["seconds"]
        lines.append(
            f"| Slurm 22.05 backup slurmctld, kill -9 of the primary -> first job started by "
            f"the backup, SlurmctldTimeout={sl['slurmctld_timeout_s']} s"
            f"{' (the default)' if sl['slurmctld_timeout_s'] == 120 else ''}, p50 of "
            f"{len(secs)} | {statistics.median(secs):.2f} s "
            f"(Slurm / Corral {statistics.median(secs) / fo['p50_s']:.1f}x) |")
    lt = res.get("large", [])
    if lt:
        lines += ["", f"Takeover with a large table ({lt[0]['active_jobs']:,} active jobs: "
                  "held pending copies of one job; lease_s = 3; p50 of "
                  f"{lt[0]['kills']} kills each):", "",
                  "| standby | kill -9 -> new leader serves | kill -> first job started | "
                  "new leader's state load |", "|---|---|---|---|"]
        for x in lt:
            lines.append(f"| {x['standby']} | {x['serve_p50_s']:.2f} s | "
                         f"{x['first_job_p50_s']:.2f} s | {x['load_p50_s']:.3f} s |")
        if len(lt) == 2:
            lines.append(f"| cold / warm | {lt[1]['serve_p50_s'] / lt[0]['serve_p50_s']:.2f}x"
                         f" | {lt[1]['first_job_p50_s'] / lt[0]['first_job_p50_s']:.2f}x | "
                         f"{lt[1]['load_p50_s'] / max(lt[0]['load_p50_s'], 1e-6):.1f}x |")
    lines += [
        "",
        f"| store ({sq['n']} `true` jobs, one connection) | SQLite | PostgreSQL | PG / SQLite |",
        "|---|---|---|---|",
    ]
    for key, label in (("submit_p50_ms", "submit latency p50 (ms)"),
                       ("submit_p99_ms", "submit latency p99 (ms)"),
                       ("submit_rate", "submit rate (jobs/s)"),
                       ("drain_rate", "drain rate (jobs/s)")):
        lines.append(f"| {label} | {sq[key]:.2f} | {pg[key]:.2f} | {pg[key] / sq[key]:.2f}× |")
    lines += ["", "Corral failover seconds per kill: "
              + ", ".join(f"{s:.2f}" for s in fo["seconds"])]
    for sl in res.get("slurm", []):
        if "seconds" in sl:
            lines.append(f"Slurm takeover seconds (SlurmctldTimeout={sl['slurmctld_timeout_s']}"
                         "): " + ", ".join(f"{s:.2f}" for s in sl["seconds"]))
    lines += ["", "Slurm's backup: two `SlurmctldHost` lines on one `StateSaveLocation`; the "
              "backup slurmctld in its own network and UTS namespace on this host "
              "(`bench/slurm_ha.py`). SlurmctldTimeout is how long the backup waits for the "
              "primary to answer before it takes control (slurm.conf(5)); Corral's standby "
              "waits out the lease (lease_s)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--load", type=int, default=2000, help="jobs submitted over the kills")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--large", type=int, default=50_000, help="active jobs (0: skip)")
    ap.add_argument("--large-kills", type=int, default=3)
    ap.add_argument("--slurm-kills", type=int, default=3)
    ap.add_argument("--slurm-timeout", type=int, default=5)
    ap.add_argument("--slurm-default", action=argparse.BooleanOptionalAction, default=True,
                    help="also one kill with the default SlurmctldTimeout (120 s)")
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
            "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "host": platform.node(),
            "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
            "command": "python bench/ha_bench.py " + " ".join(sys.argv[1:])}
        print("failover ...", flush=True)
        res["failover"] = failover(pg, root, args.kills, args.load)
        if args.large:
            res["large"] = []
            for refresh_s in (2.0, 0.0):
                print(f"large table, standby_refresh_s={refresh_s} ...", flush=True)
                res["large"].append(large_takeover(pg, root, args.large, refresh_s,
                                                   args.large_kills))
        from bench.slurm_ha import available, measure

        res["slurm"] = []
        why = available()
        plan = [(args.slurm_timeout, args.slurm_kills)] if args.slurm_kills else []
        if args.slurm_default:
            plan.append((0, 1))
        for timeout_s, kills in plan:
            print(f"slurm, SlurmctldTimeout={timeout_s or 'default'} ...", flush=True)
            if why:
                res["slurm"].append({"error": why})
                break
            try:
                res["slurm"].append(measure(timeout_s or None, kills, 400))
            except Exception as exc:  # noqa: BLE001 - reported in the results
                res["slurm"].append({"error": f"{type(exc).__name__}: {exc}"})
        print("sqlite ...", flush=True)
        res["sqlite"] = store_run(f"sqlite:///{root / 'sq.db'}", root / "sq", args.n)
        print("postgresql ...", flush=True)
        res["postgresql"] = store_run(pg.create_db("bench_store"), root / "pgs", args.n)
        res["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
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
