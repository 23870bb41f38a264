"""Node health checks (Slurm's ``HealthCheckProgram``): when to ask a node, and what its
answer does.

The controller decides when (its ``tick``): a connected node is asked when its agent
registers and then every ``[health_check] interval_s`` while its state is one of
``node_state`` (``any``; ``idle``, ``alloc``, ``mixed`` by the node's load, a drained
node counting by its load as in Slurm, ``nondrained_idle``: idle and not drained;
``cycle``: the nodes' first checks are spread over the interval instead of all at once).
The agent runs the program as its own user (root on a real cluster) with a timeout and
answers ``{"t": "health", "ok": ..., "message": ...}``.

A failing check (exit status not 0, killed, timed out, not runnable) drains the node with
the program's message (its last line of output; else the status), unless an operator
already drained or downed it. A passing check returns a node that the health check itself
drained, never one an operator drained (``NodeRecord.health_drained`` says which, and
is stored with the node). Slurm leaves draining to the program (NHC calls ``scontrol``);
Corral does it from the exit status, so a plain script is enough, and a program that
calls ``scontrol update`` works too.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from corral.controller.records import NodeRecord
from corral.core.model.node import NodeState

if TYPE_CHECKING:
    from corral.controller.service import Controller

log = logging.getLogger("corral.health")


def load_state(rec: NodeRecord) -> str:
    """``idle``, ``alloc`` or ``mixed`` by the node's load (its drain aside)."""
    if not rec.jobs:
        return "idle"
    return "alloc" if rec.alloc_cpus >= rec.spec.cpus else "mixed"


def wanted(rec: NodeRecord, states: tuple[str, ...]) -> bool:
    """Whether a check runs on ``rec`` now (``HealthCheckNodeState``)."""
    if not rec.connected or rec.state in (NodeState.UNKNOWN, NodeState.FUTURE):
        return False
    names = {s.lower() for s in states} - {"cycle"}
    if not names or "any" in names:
        return True
    load = load_state(rec)
    if load in names:
        return True
    drained = rec.state in (NodeState.DRAINING, NodeState.DRAINED)
    return "nondrained_idle" in names and load == "idle" and not drained \
        and rec.state is not NodeState.DOWN


class HealthChecks:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.due: dict[str, float] = {}  # node -> when its next check is due
        self.asked: dict[str, float] = {}  # node -> when the check in flight was asked

    @property
    def enabled(self) -> bool:
        return bool(self.ctl.cfg.health_check.program)

    def registered(self, name: str, now: float) -> None:
        """An agent (re)connected: check it at once (as slurmd does when it starts)."""
        if self.enabled:
            self.due[name] = now
            self.asked.pop(name, None)
            self.tick(now)

    def tick(self, now: float) -> None:
        """Ask every node whose check is due (and not in flight)."""
        if not self.enabled:
            return
        cfg = self.ctl.cfg.health_check
        cycle = any(s.lower() == "cycle" for s in cfg.node_state)
        names = sorted(self.ctl.nodes.nodes)
        for i, name in enumerate(names):
            rec = self.ctl.nodes.nodes[name]
            if name not in self.due:
                spread = cfg.interval_s * i / len(names) if cycle and cfg.interval_s else 0
                self.due[name] = now + spread if cfg.interval_s else float("inf")
            asked = self.asked.get(name)
            if asked is not None:
                if now - asked < cfg.timeout_s + 30:
                    continue
                del self.asked[name]  # the answer was lost (agent gone): ask again
            if now < self.due[name] or not wanted(rec, cfg.node_state):
                continue
            conn = self.ctl.hub.conns.get(name)
            if conn is None:
                continue
            conn.send({"t": "health_check", "program": cfg.program,
                       "timeout_s": cfg.timeout_s})
            self.asked[name] = now
            self.due[name] = now + cfg.interval_s if cfg.interval_s else float("inf")

    def result(self, name: str, ok: bool, message: str) -> None:
        """Apply a node's answer: drain it, or return it from a drain of the check's."""
        self.asked.pop(name, None)
        rec = self.ctl.nodes.nodes.get(name)
        if rec is None:
            return
        nodes = self.ctl.nodes
        if not ok:
            reason = (message or "HealthCheckProgram failed")[:200]
            if rec.admin_state and not rec.health_drained:
                return  # an operator's drain or down stands
            if rec.health_drained and rec.reason == reason:
                return
            log.warning("node %s: health check failed: %s: draining", name, reason)
            nodes.drain(name, reason, by_health=True)
            self.ctl.sched.trigger()
            return
        if rec.health_drained and rec.admin_state == "drain":
            log.info("node %s: health check passed: returned to service", name)
            nodes.resume(name)
            self.ctl.sched.trigger()
