"""Prometheus metrics of the controller (served at ``/metrics``).

A private ``CollectorRegistry`` per controller (tests run several in one process). Label
cardinality is bounded: states, partitions and reasons, never job ids. The operations
helper extends this set (issue 6); the hook points are the methods below.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# finer from 0.25 s to 2.5 s, where a deep queue's cycles lie (the p99 is read from
# these buckets, linear within one)
_CYCLE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.375, 0.5,
                  0.75, 1.0, 1.5, 2.5, 5.0, 10.0)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.cycle_seconds = Histogram(
            "corral_scheduler_cycle_seconds", "Duration of one scheduling cycle",
            buckets=_CYCLE_BUCKETS, registry=r)
        self.cycle_jobs_started = Counter(
            "corral_scheduler_jobs_started_total", "Jobs started by scheduling cycles",
            registry=r)
        self.jobs_submitted = Counter(
            "corral_jobs_submitted_total", "Jobs accepted (array tasks count one each)",
            registry=r)
        self.jobs_ended = Counter(
            "corral_jobs_ended_total", "Jobs that reached a terminal state", ["state"],
            registry=r)
        self.submit_seconds = Histogram(
            "corral_submit_seconds", "Time to accept one submission (including the commit)",
            buckets=_CYCLE_BUCKETS, registry=r)
        self.jobs_gauge = Gauge("corral_jobs", "Active jobs by state", ["state"], registry=r)
        self.nodes_gauge = Gauge("corral_nodes", "Nodes by state", ["state"], registry=r)
        self.agents_connected = Gauge("corral_agents_connected", "Connected agents",
                                      registry=r)
        # high availability (``corral.controller.roles``): 1 while this controller leads
        self.leader = Gauge("corral_controller_leader",
                            "1 while this controller is the leader, 0 as a standby",
                            registry=r)
        self.leader_epoch = Gauge("corral_leader_epoch",
                                  "Fencing epoch of this controller's leadership", registry=r)
        self.takeovers = Gauge("corral_leader_takeovers",
                               "Times this controller process became the leader", registry=r)
        self.failovers = Gauge("corral_failovers",
                               "Leader changes recorded in the database (the epoch - 1)",
                               registry=r)
        # the per-user request limiter (``corral.controller.ratelimit``), read at render
        self.rate_limited = Gauge("corral_rate_limited_requests",
                                  "Requests refused by the per-user rate limit (429) since "
                                  "the controller started", registry=r)
        self.rate_allowed = Gauge("corral_rate_checked_requests",
                                  "Requests the per-user rate limit let through since the "
                                  "controller started (root and agents are not counted)",
                                  registry=r)
        self.rate_users = Gauge("corral_rate_limit_users",
                                "Users whose request bucket is tracked now", registry=r)
        # children of the labels set on every submit and end, looked up once (``labels``
        # takes a lock and builds a key on each call)
        self._pending = self.jobs_gauge.labels("PENDING")
        self._running = self.jobs_gauge.labels("RUNNING")
        self._ended: dict[str, Any] = {}

    def submitted(self, n: int, seconds: float) -> None:
        self.jobs_submitted.inc(n)
        self.submit_seconds.observe(seconds)

    def job_ended(self, state: str) -> None:
        child = self._ended.get(state)
        if child is None:
            child = self._ended[state] = self.jobs_ended.labels(state)
        child.inc()

    def cycle(self, seconds: float, started: int) -> None:
        self.cycle_seconds.observe(seconds)
        if started:
            self.cycle_jobs_started.inc(started)

    def set_jobs(self, pending: int, running: int) -> None:
        self._pending.set(pending)
        self._running.set(running)

    def set_nodes(self, nodes: Iterable[Any]) -> None:
        counts: dict[str, int] = {}
        for n in nodes:
            counts[n.state.value] = counts.get(n.state.value, 0) + 1
        for state in ("IDLE", "MIXED", "ALLOCATED", "DRAINING", "DRAINED", "DOWN", "UNKNOWN"):
            self.nodes_gauge.labels(state).set(counts.get(state, 0))

    def set_rate_limits(self, limiter: Any) -> None:
        """Copy the limiter's counters (``RateLimiter``; ``None`` when it is off)."""
        if limiter is None:
            return
        self.rate_limited.set(limiter.limited)
        self.rate_allowed.set(limiter.allowed)
        self.rate_users.set(len(limiter.buckets))

    def render(self) -> bytes:
        out: bytes = generate_latest(self.registry)
        return out
