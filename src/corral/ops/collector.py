"""Prometheus collector of the controller: reads its in-memory state at scrape time.

``ControllerCollector(ctl)`` is registered on the controller's registry
(``ctl.metrics.registry``) and answers each scrape from what the controller already holds
in memory: no database access, no per-job labels (label values are states, partitions,
pending reasons, node states and account names: all bounded by the configuration and
Slurm's reason list, not by the number of jobs).

Attributes it reads from ``ctl`` (the controller, or a test double with the same shape):
``pending``/``running``/``jobs`` (id -> job record with ``state``, ``partition``,
``reason``, ``submit_time``, ``start_time``, ``restarts``, ``sub.spec``), ``nodes.nodes``
(name -> node record with ``state``, ``connected``, ``spec``, ``alloc_cpus``,
``alloc_mem_mb``, ``alloc_gpus``, ``partitions``), ``nodes.partitions``, ``usage`` and
``cfg`` (``cluster_name``, ``account_tree()``).

Metrics (see ``docs/operations.md`` for the full table):

- ``corral_jobs_active{state,partition}``, ``corral_jobs_pending{partition,reason}``,
  ``corral_pending_cpus{partition}`` (CPUs the queue asks for),
  ``corral_pending_oldest_seconds{partition}``;
- ``corral_partition_nodes{partition,state}``, ``corral_partition_cpus{partition,status}``,
  ``corral_partition_memory_bytes{...}``, ``corral_partition_gpus{...}`` with status
  ``allocated`` / ``idle`` / ``other`` (on nodes that cannot take jobs: down, drained,
  agent gone), as ``sinfo``'s A/I/O; the sum over status is the total;
  ``corral_cluster_cpus{status}`` etc. count each node once (partitions may overlap);
- ``corral_account_fairshare{account}``, ``corral_account_shares_norm{account}``,
  ``corral_account_usage_norm{account}``, ``corral_account_usage_cpu_seconds{account}``;
- ``corral_job_wait_seconds{partition}`` (histogram: submit to start) and
  ``corral_partition_jobs_started_total{partition}``: each start is observed once, at the
  first scrape after it (jobs stay in memory while running and ``min_job_age_s`` after,
  far longer than a scrape interval); starts before this controller process began are not
  counted again after a restart;
- ``corral_info{cluster,version}``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from corral import __version__
from corral.ops.fairshare import account_rows

WAIT_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0,
                  1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0, 172800.0, 604800.0)
ACTIVE_STATES = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING")
NODE_STATES = ("IDLE", "MIXED", "ALLOCATED", "DRAINING", "DRAINED", "DOWN", "UNKNOWN", "FUTURE")
_MB = 1024 * 1024


def requested_cpus(spec: Any) -> int:
    """CPUs a pending job asks for (its smallest start), as the API's ``num_cpus``."""
    if spec.task_groups:
        return sum(int(g.replicas) * int(g.cpus_per_task) for g in spec.task_groups)
    tasks = spec.ntasks or (spec.ntasks_per_node or 1) * spec.nodes_min
    return int(tasks) * int(spec.cpus_per_task)


class _WaitHistogram:
    """Cumulative bucket counts per partition, kept by the collector across scrapes."""

    def __init__(self, buckets: tuple[float, ...]) -> None:
        self.buckets = buckets
        self.counts: dict[str, list[int]] = {}
        self.sums: dict[str, float] = {}

    def observe(self, label: str, value: float) -> None:
        counts = self.counts.setdefault(label, [0] * (len(self.buckets) + 1))
        for i, b in enumerate(self.buckets):
            if value <= b:
                counts[i] += 1
        counts[-1] += 1  # +Inf
        self.sums[label] = self.sums.get(label, 0.0) + value

    def family(self, name: str, doc: str) -> HistogramMetricFamily:
        fam = HistogramMetricFamily(name, doc, labels=["partition"])
        for label in sorted(self.counts):
            c = self.counts[label]
            buckets = [(str(floatToGoString(b)), float(n))  # type: ignore[no-untyped-call]
                       for b, n in zip(self.buckets, c, strict=False)]
            buckets.append(("+Inf", float(c[-1])))
            fam.add_metric([label], buckets, self.sums[label])
        return fam


class ControllerCollector(Collector):
    def __init__(self, ctl: Any, clock: Any = time.time) -> None:
        self.ctl = ctl
        self.clock = clock
        self.since = float(clock())
        self._seen: set[tuple[int, int]] = set()
        self._started: dict[str, int] = {}
        self._wait = _WaitHistogram(WAIT_BUCKETS_S)
        self._tree: Any = None

    # ---- helpers ---------------------------------------------------------------------

    def _default_partition(self) -> str:
        parts = self.ctl.nodes.partitions
        for p in parts:
            if p.is_default:
                return str(p.name)
        return str(parts[0].name) if parts else "default"

    def _partition_of(self, rec: Any, default: str) -> str:
        if rec.partition:
            return str(rec.partition)
        parts = rec.sub.spec.partitions
        return str(parts[0]) if parts else default

    def _account_tree(self) -> Any:
        if self._tree is None:
            self._tree = self.ctl.cfg.account_tree()
        return self._tree

    def _observe_starts(self, default: str) -> None:
        present: set[tuple[int, int]] = set()
        for rec in self.ctl.jobs.values():
            if rec.start_time is None:
                continue
            key = (int(rec.id), int(rec.restarts))
            present.add(key)
            if key in self._seen or float(rec.start_time) < self.since:
                continue
            self._seen.add(key)
            part = self._partition_of(rec, default)
            self._started[part] = self._started.get(part, 0) + 1
            self._wait.observe(part, max(0.0, float(rec.start_time) - float(rec.submit_time)))
        self._seen &= present

    # ---- collect ---------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        ctl = self.ctl
        now = float(self.clock())
        default = self._default_partition()
        info = GaugeMetricFamily("corral_info", "Cluster name and Corral version",
                                 labels=["cluster", "version"])
        info.add_metric([str(ctl.cfg.cluster_name), __version__], 1.0)
        yield info
        yield from self._jobs(now, default)
        yield from self._resources()
        yield from self._fairshare()
        self._observe_starts(default)
        yield self._wait.family("corral_job_wait_seconds",
                                "Queue wait of started jobs (submit to start), by partition")
        started = CounterMetricFamily("corral_partition_jobs_started",
                                      "Jobs started, by partition (since the controller "
                                      "started)", labels=["partition"])
        for part in sorted(self._started):
            started.add_metric([part], float(self._started[part]))
        yield started

    def _jobs(self, now: float, default: str) -> Iterable[Metric]:
        ctl = self.ctl
        by_state: dict[tuple[str, str], int] = {}
        by_reason: dict[tuple[str, str], int] = {}
        cpus: dict[str, int] = {}
        oldest: dict[str, float] = {}
        parts = {str(p.name) for p in ctl.nodes.partitions}
        for rec in list(ctl.pending.values()) + list(ctl.running.values()):
            part = self._partition_of(rec, default)
            state = rec.state.value
            by_state[(state, part)] = by_state.get((state, part), 0) + 1
            if state == "PENDING":
                reason = str(rec.reason or "None")
                by_reason[(part, reason)] = by_reason.get((part, reason), 0) + 1
                cpus[part] = cpus.get(part, 0) + requested_cpus(rec.sub.spec)
                waited = max(0.0, now - float(rec.submit_time))
                oldest[part] = max(oldest.get(part, 0.0), waited)
        active = GaugeMetricFamily("corral_jobs_active", "Active jobs by state and partition",
                                   labels=["state", "partition"])
        for part in sorted(parts | {p for _, p in by_state}):
            for state in ACTIVE_STATES:
                active.add_metric([state, part], float(by_state.get((state, part), 0)))
        yield active
        pend = GaugeMetricFamily("corral_jobs_pending",
                                 "Pending jobs by partition and Slurm-style reason",
                                 labels=["partition", "reason"])
        for (part, reason), n in sorted(by_reason.items()):
            pend.add_metric([part, reason], float(n))
        yield pend
        demand = GaugeMetricFamily("corral_pending_cpus", "CPUs requested by pending jobs",
                                   labels=["partition"])
        age = GaugeMetricFamily("corral_pending_oldest_seconds",
                                "Age of the oldest pending job (0 when none)",
                                labels=["partition"])
        for part in sorted(parts | set(cpus)):
            demand.add_metric([part], float(cpus.get(part, 0)))
            age.add_metric([part], oldest.get(part, 0.0))
        yield demand
        yield age

    def _resources(self) -> Iterable[Metric]:
        ctl = self.ctl
        nodes = ctl.nodes.nodes
        fams = {
            "cpus": GaugeMetricFamily("corral_partition_cpus",
                                      "CPUs per partition by status (allocated/idle/other)",
                                      labels=["partition", "status"]),
            "mem": GaugeMetricFamily("corral_partition_memory_bytes",
                                     "Memory per partition by status (allocated/idle/other)",
                                     labels=["partition", "status"]),
            "gpus": GaugeMetricFamily("corral_partition_gpus",
                                      "GPUs per partition by status (allocated/idle/other)",
                                      labels=["partition", "status"]),
        }
        cluster = {
            "cpus": GaugeMetricFamily("corral_cluster_cpus", "CPUs of the cluster by status",
                                      labels=["status"]),
            "mem": GaugeMetricFamily("corral_cluster_memory_bytes",
                                     "Memory of the cluster by status", labels=["status"]),
            "gpus": GaugeMetricFamily("corral_cluster_gpus", "GPUs of the cluster by status",
                                      labels=["status"]),
        }
        node_states = GaugeMetricFamily("corral_partition_nodes",
                                        "Nodes per partition by state",
                                        labels=["partition", "state"])

        def tally(names: Iterable[str]) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
            res = {k: {"allocated": 0.0, "idle": 0.0, "other": 0.0} for k in fams}
            states = {s: 0 for s in NODE_STATES}
            for name in names:
                n = nodes.get(name)
                if n is None:
                    continue
                st = n.state.value
                states[st] = states.get(st, 0) + 1
                usable = bool(n.state.schedulable) and bool(n.connected)
                for key, total, alloc in (
                        ("cpus", n.spec.cpus, n.alloc_cpus),
                        ("mem", n.spec.mem_mb * _MB, n.alloc_mem_mb * _MB),
                        ("gpus", len(n.spec.gpus), n.alloc_gpus)):
                    alloc = min(float(alloc), float(total))
                    res[key]["allocated"] += alloc
                    res[key]["idle" if usable else "other"] += float(total) - alloc
            return res, states

        for p in ctl.nodes.partitions:
            res, states = tally(p.nodes)
            for key, fam in fams.items():
                for status, v in res[key].items():
                    fam.add_metric([str(p.name), status], v)
            for st, c in states.items():
                node_states.add_metric([str(p.name), st], float(c))
        res, _ = tally(nodes.keys())
        for key, fam in cluster.items():
            for status, v in res[key].items():
                fam.add_metric([status], v)
        yield from fams.values()
        yield from cluster.values()
        yield node_states

    def _fairshare(self) -> Iterable[Metric]:
        rows = account_rows(self._account_tree(), dict(self.ctl.usage))
        fs = GaugeMetricFamily("corral_account_fairshare",
                               "Classic fair-share factor of an account, 2^(-usage/shares): "
                               "1 unused, 0.5 at its share", labels=["account"])
        shares = GaugeMetricFamily("corral_account_shares_norm",
                                   "Normalized shares of an account (fraction of the cluster)",
                                   labels=["account"])
        eff = GaugeMetricFamily("corral_account_usage_norm",
                                "Effective usage of an account (fraction of all usage)",
                                labels=["account"])
        raw = GaugeMetricFamily("corral_account_usage_cpu_seconds",
                                "CPU-seconds charged to an account (as fair share sees them)",
                                labels=["account"])
        for r in rows:
            fs.add_metric([r.account], r.fairshare)
            shares.add_metric([r.account], r.norm_shares)
            eff.add_metric([r.account], r.eff_usage)
            raw.add_metric([r.account], r.raw_usage)
        yield fs
        yield shares
        yield eff
        yield raw

    def describe(self) -> Iterable[Metric]:
        return []  # dynamic: computed at scrape time


def register(ctl: Any) -> ControllerCollector:
    """Create the collector and register it on ``ctl.metrics.registry`` (once per
    controller: a second call returns the registered one)."""
    existing = getattr(ctl.metrics, "ops_collector", None)
    if isinstance(existing, ControllerCollector):
        return existing
    col = ControllerCollector(ctl)
    ctl.metrics.registry.register(col)
    ctl.metrics.ops_collector = col
    return col
