"""Periodic cluster checks: ``[checks] interval_s`` (0 = off).

Every ``interval_s`` after the last run ended, the controller starts one ``--quick`` run of
``corral check cluster`` (``corral.checks.cluster.run_cluster``, the code the command runs)
in a thread of its own, as a client of its own Unix socket: the checks are ordinary jobs,
submitted at the lowest priority (``[checks] nice``, 10000 by default, as ``sbatch
--nice``), so they wait behind every other job and preempt nothing (unless their
partition or QOS is set to preempt). The report is kept under ``<state dir>/checks/
reports/<run id>/`` (the controller's state dir: ``corral check history`` and the web UI
list it), the oldest periodic runs beyond ``keep_runs`` are removed, and with
``drain_outliers = true`` the nodes named are drained with the verdict as the reason.

One run at a time; a run that fails (no usable node, no compiler, the controller going
away) is logged and the next is due an interval later. ``tick`` is called from the
controller's ticker; it only starts a thread and reads a flag, never blocks the loop.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral.checks.settings import ChecksConfig

log = logging.getLogger("corral.controller.checks")


class PeriodicChecks:
    def __init__(self, settings: Callable[[], ChecksConfig], state_dir: Path,
                 socket_path: Callable[[], Path],
                 runner: Callable[..., dict[str, Any]] | None = None) -> None:
        self._settings = settings
        self.checks_dir = state_dir / "checks"
        self._socket_path = socket_path
        self._runner = runner
        self.due: float | None = None  # when the next run starts; None: not planned yet
        self.running: threading.Thread | None = None
        self.last: dict[str, Any] | None = None  # summary of the last run
        self.stopped = threading.Event()
        self._lock = threading.Lock()

    def tick(self, now: float) -> None:
        cfg = self._settings()
        if cfg.interval_s <= 0 or self.stopped.is_set():
            self.due = None
            return
        if self.due is None:
            self.due = now + cfg.interval_s
        if now < self.due or (self.running is not None and self.running.is_alive()):
            return
        self.due = float("inf")  # until this run ends
        self.running = threading.Thread(target=self._run, args=(cfg,), daemon=True,
                                        name="corral-periodic-check")
        self.running.start()

    def stop(self) -> None:
        self.stopped.set()

    def _run(self, cfg: ChecksConfig) -> None:
        import time

        from corral.checks.cluster import CheckError, run_cluster
        from corral.client import Client, CorralError

        run = self._runner or run_cluster
        summary: dict[str, Any]
        try:
            with Client(socket_path=str(self._socket_path()), timeout_s=30) as client:
                record = run(client, self.checks_dir, quick=True,
                             wanted=("network", "compute", "storage", "gpu"),
                             drain=cfg.drain_outliers, nice=cfg.nice,
                             prog="corral periodic check", trigger="periodic")
            summary = {"run_id": record["run_id"], "ok": record["ok"],
                       "outliers": sorted({v["subject"] for v in record["verdicts"]}),
                       "drained": record.get("drained", [])}
            log.info("periodic check %s: %s", record["run_id"],
                     "every node and link within limits" if record["ok"] else
                     "outliers " + ", ".join(summary["outliers"]))
        except (CheckError, CorralError, OSError) as exc:
            summary = {"error": str(exc)}
            log.warning("periodic check failed: %s", exc)
        except Exception as exc:  # a bug must not end the controller's checks for good
            summary = {"error": repr(exc)}
            log.exception("periodic check failed")
        finally:
            with self._lock:
                self.due = time.time() + cfg.interval_s
        self.last = summary
        self.prune(cfg.keep_runs)

    def prune(self, keep: int) -> None:
        """Remove the oldest periodic runs (report and run directory) beyond ``keep``."""
        reports = self.checks_dir / "reports"
        periodic: list[tuple[float, Path, str | None]] = []
        for f in reports.glob("*/result.json"):
            try:
                rec = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            plan = rec.get("plan") or {}
            if plan.get("trigger") == "periodic":
                periodic.append((float(rec.get("started") or 0), f.parent,
                                 plan.get("run_dir")))
        periodic.sort()
        for _started, report_dir, run_dir in periodic[:max(0, len(periodic) - keep)]:
            shutil.rmtree(report_dir, ignore_errors=True)
            if run_dir and Path(run_dir).parent == self.checks_dir / "runs":
                shutil.rmtree(run_dir, ignore_errors=True)
