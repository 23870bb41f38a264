"""Node table: registration, allocation bookkeeping, admin states, heartbeat timeouts.

A node's state follows the state table of ``corral.core.model.transitions``: registration
brings it up, its load makes it IDLE/MIXED/ALLOCATED, an operator drains or downs it, a
lost agent makes it DOWN after ``node_down_after_s``. Jobs on a DOWN node are ended
(NODE_FAIL, or requeued when they allow it) only after ``node_fail_grace_s`` more, so a
brief disconnect (agent restart, network blip) never kills live jobs: an agent that comes
back in time re-adopts them. Operator drain/down survives controller restarts (stored).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from corral.config.schema import NodeConfig
from corral.controller.auth import Identity
from corral.controller.errors import ApiError
from corral.controller.records import JobRecord, NodeRecord
from corral.controller.store import Store
from corral.core.model.job import JobState
from corral.core.model.node import NodeSpec, NodeState
from corral.core.model.partition import Partition
from corral.core.model.transitions import IllegalTransition, NodeEvent, node_transition
from corral.protocol.messages import node_spec_from_json, node_spec_to_json

if TYPE_CHECKING:
    from corral.controller.service import Controller

log = logging.getLogger("corral.nodes")


def merge_spec(discovered: NodeSpec, conf: NodeConfig | None) -> NodeSpec:
    """The configured facts override the discovered ones (Slurm ``config_overrides``)."""
    if conf is None:
        return discovered
    changes: dict[str, Any] = {}
    if conf.cpus is not None and conf.sockets is None and conf.cores_per_socket is None:
        changes.update(sockets=1, cores_per_socket=conf.cpus, threads_per_core=1)
    for key in ("sockets", "cores_per_socket", "threads_per_core", "mem_mb"):
        v = getattr(conf, key)
        if v is not None:
            changes[key] = v
    if "sockets" in changes or "cores_per_socket" in changes or "threads_per_core" in changes:
        same = all(changes.get(k, getattr(discovered, k)) == getattr(discovered, k)
                   for k in ("sockets", "cores_per_socket", "threads_per_core"))
        if not same:
            changes.update(numa=(), core_cpus=())
    if conf.gpus is not None:
        from corral.core.model.node import GpuSpec

        gpus = list(discovered.gpus[: conf.gpus])
        for i in range(len(gpus), conf.gpus):
            gpus.append(GpuSpec(index=i, type=conf.gpu_type))
        changes["gpus"] = tuple(gpus)
    if conf.features:
        changes["features"] = frozenset(conf.features) | discovered.features
    if conf.gres:
        changes["gres"] = conf.gres
    if conf.switch is not None:
        changes["switch"] = conf.switch
        changes["uplinks"] = conf.uplinks
    if conf.weight != 1:
        changes["weight"] = conf.weight
    return dataclasses.replace(discovered, **changes)


def _peer_host(peer: Any) -> str:
    """The host part of a connection's peer (a Starlette ``Address`` or a (host, port)
    tuple); "" when there is none (Unix socket)."""
    host = getattr(peer, "host", None)
    if host is None and isinstance(peer, (tuple, list)) and peer:
        host = peer[0]
    return str(host or "")


def spec_from_config(conf: NodeConfig) -> NodeSpec:
    base = NodeSpec(name=conf.name, mem_mb=conf.mem_mb or 0)
    return merge_spec(base, conf)


class NodeTable:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.nodes: dict[str, NodeRecord] = {}
        self.partitions: tuple[Partition, ...] = ()
        self._last_check: float | None = None  # check_timeouts' previous run
        self._closing: set[asyncio.Task[None]] = set()  # connections of lost agents
        self.configured = ctl.cfg.node_configs()
        for name, conf in self.configured.items():
            if not conf.discover:
                self.nodes[name] = NodeRecord(spec=spec_from_config(conf),
                                              state=NodeState.UNKNOWN)
                if conf.cloud:  # State=CLOUD: exists once resumed ([power])
                    rec = self.nodes[name]
                    rec.cloud = True
                    rec.power = "POWERED_DOWN"
                    rec.state = NodeState.IDLE
        self._refresh_partitions()

    def verdict_deferred(self, partitions: tuple[str, ...]) -> bool:
        """True while the nodes that could run a job in ``partitions`` (empty: the default
        partition) are not all known yet: a configured node has never registered, or the
        partitions have no node at all (an elastic cluster before its first node). The
        "can never run" verdict then waits; the job is queued, never refused because an
        agent has not connected yet."""
        if any(name not in self.nodes for name in self.configured):
            return True
        wanted = [p for p in self.partitions
                  if (p.name in partitions if partitions else p.is_default)]
        return bool(wanted) and all(not p.nodes for p in wanted)

    # ---- persistence -----------------------------------------------------------------

    def load(self, rows: list[Any]) -> None:
        for row in rows:
            spec = node_spec_from_json(json.loads(row.spec))
            conf = self.configured.get(row.name)
            if conf is not None and not conf.discover:
                spec = spec_from_config(conf)
            elif conf is not None:
                spec = merge_spec(spec, conf)
            elif not self.ctl.cfg.accept_unknown_nodes:
                continue
            rec = NodeRecord(spec=spec, state=NodeState.UNKNOWN)
            rec.admin_state = row.admin_state or ""
            rec.reason = row.reason or ""
            try:
                data = json.loads(row.data or "{}")
            except ValueError:
                data = {}
            if isinstance(data, dict):
                rec.address = str(data.get("address") or "")
                rec.hostname = str(data.get("hostname") or "")
                rec.health_drained = bool(data.get("health_drained")) and \
                    rec.admin_state == "drain"
                power = str(data.get("power") or "")
                if conf is not None and conf.cloud:
                    rec.cloud = True
                    power = power or "POWERED_DOWN"
                if power in ("POWERED_DOWN", "POWERING_DOWN") and rec.admin_state != "down":
                    rec.power = "POWERED_DOWN"
                    rec.state = NodeState.IDLE
                elif power == "POWERING_UP":
                    rec.power = power
                    rec.state = NodeState.IDLE
                    rec.power_deadline = time.time() + self.ctl.cfg.power.resume_timeout_s
            if rec.admin_state == "down":
                rec.state = NodeState.DOWN
            self.nodes[row.name] = rec
        self._refresh_partitions()

    def _save(self, rec: NodeRecord) -> None:
        self.ctl.store.submit(Store.op_upsert_node(
            rec.name, node_spec_to_json(rec.spec), rec.admin_state, rec.reason,
            {"boot_time": rec.boot_time, "address": rec.address, "hostname": rec.hostname,
             "health_drained": rec.health_drained, "power": rec.power}))

    def save(self, rec: NodeRecord) -> None:
        """Store ``rec`` (its power state changed: ``corral.controller.power``)."""
        self._save(rec)
        self.ctl.metrics.set_nodes(self.nodes.values())

    def end_on_lost_node(self, job: JobRecord, now: float, name: str) -> None:
        self._end_on_lost_node(job, now, name)

    def config_changed(self) -> None:
        """Partitions (their states) changed at run time (``livecfg``)."""
        self._refresh_partitions()

    def _refresh_partitions(self) -> None:
        names = sorted(self.nodes)
        self.partitions = self.ctl.cfg.partition_models(names)
        member: dict[str, list[str]] = {n: [] for n in names}
        for p in self.partitions:
            for n in p.nodes:
                member.setdefault(n, []).append(p.name)
        for n, rec in self.nodes.items():
            rec.partitions = tuple(member.get(n, ()))

    # ---- allocation bookkeeping -------------------------------------------------------

    def allocate(self, job: JobRecord) -> None:
        assert job.allocation is not None
        for na in job.allocation.nodes:
            rec = self.nodes.get(na.node)
            if rec is None:
                continue
            rec.jobs.add(job.id)
            rec.alloc_cpus += na.cpus
            rec.alloc_mem_mb += na.mem_mb
            rec.alloc_gpus += len(na.gpus)
            self.refresh_load(rec)

    def release(self, job: JobRecord) -> None:
        if job.allocation is None:
            return
        # a job of task groups has one entry per (node, group): release every entry of
        # a node before the job leaves the node's job set (the second group's share on
        # a node was kept allocated for ever when the first entry removed the job)
        held = [na for na in job.allocation.nodes
                if (r := self.nodes.get(na.node)) is not None and job.id in r.jobs]
        for na in held:
            rec = self.nodes[na.node]
            rec.alloc_cpus = max(0, rec.alloc_cpus - na.cpus)
            rec.alloc_mem_mb = max(0, rec.alloc_mem_mb - na.mem_mb)
            rec.alloc_gpus = max(0, rec.alloc_gpus - len(na.gpus))
        for name in {na.node for na in held}:
            rec = self.nodes[name]
            rec.jobs.discard(job.id)
            self.refresh_load(rec)

    def suspend(self, job: JobRecord, suspended: bool = True) -> None:
        """A SUSPENDED job gives its CPUs back (as in the core's pool) and keeps its
        memory and GPUs; ``suspended=False`` takes them again (resume, or before the
        job's release)."""
        if job.allocation is None:
            return
        for na in job.allocation.nodes:
            rec = self.nodes.get(na.node)
            if rec is None or job.id not in rec.jobs:
                continue
            rec.alloc_cpus = max(0, rec.alloc_cpus + (-na.cpus if suspended else na.cpus))
            self.refresh_load(rec)

    def refresh_load(self, rec: NodeRecord) -> None:
        if rec.state in (NodeState.DOWN, NodeState.UNKNOWN, NodeState.FUTURE):
            return
        if not rec.jobs:
            ev = NodeEvent.LOAD_NONE
        elif rec.alloc_cpus >= rec.spec.cpus:
            ev = NodeEvent.LOAD_FULL
        else:
            ev = NodeEvent.LOAD_PARTIAL
        try:
            rec.state = node_transition(rec.state, ev)
        except IllegalTransition:
            pass

    # ---- agent lifecycle -------------------------------------------------------------

    def register(self, discovered: NodeSpec, agent_version: str,
                 boot_time: float | None, *, peer: Any = None,
                 hostname: Any = None) -> NodeRecord:
        """``peer``: the (host, port) the agent's connection comes from (None over the
        Unix socket): the node's address (Slurm's NodeAddr); ``hostname``: the agent's
        own host name (NodeHostName)."""
        name = discovered.name
        conf = self.configured.get(name)
        rec = self.nodes.get(name)
        if rec is None and conf is None and not self.ctl.cfg.accept_unknown_nodes:
            raise ApiError("forbidden", f"node {name!r} is not configured and "
                           "accept_unknown_nodes is false")
        spec = spec_from_config(conf) if conf is not None and not conf.discover else \
            merge_spec(discovered, conf)
        new = rec is None
        if rec is None:
            rec = NodeRecord(spec=spec)
            self.nodes[name] = rec
        else:
            rec.spec = spec
        rec.connected = True
        rec.last_seen = time.time()
        if rec.power in ("POWERED_DOWN", "POWERING_UP"):  # resumed (or started by hand)
            rec.power = ""
            rec.power_deadline = None
        rec.agent_version = agent_version
        rec.boot_time = boot_time
        rec.address = _peer_host(peer)
        rec.hostname = str(hostname or "")
        if rec.admin_state != "down":
            if rec.state in (NodeState.DOWN, NodeState.UNKNOWN, NodeState.FUTURE):
                rec.state = node_transition(rec.state, NodeEvent.REGISTER)
                if rec.admin_state == "drain":
                    rec.state = node_transition(rec.state, NodeEvent.DRAIN)
                else:
                    rec.reason = ""
            rec.down_since = None
            self.refresh_load(rec)
        if new:
            self._refresh_partitions()
        self._save(rec)
        self.ctl.metrics.set_nodes(self.nodes.values())
        return rec

    def seen(self, name: str) -> None:
        rec = self.nodes.get(name)
        if rec is not None:
            rec.last_seen = time.time()

    def disconnected(self, name: str) -> None:
        rec = self.nodes.get(name)
        if rec is not None:
            rec.connected = False

    def _lost(self, rec: NodeRecord, now: float) -> None:
        """A connected agent that sent nothing for ``node_down_after_s`` (stopped, hung,
        or its host's link cut while the TCP connection stays open here): close that
        connection (the agent reconnects normally once it runs again) and count the node
        as disconnected, so the timeout below takes it DOWN."""
        log.warning("node %s: connected, but no frame from its agent for %.1f s: closing "
                    "the connection", rec.name, now - (rec.last_seen or now))
        hub = self.ctl.hub
        conn = hub.conns.get(rec.name)
        if conn is not None:
            del hub.conns[rec.name]  # the reader's cleanup now leaves the node alone
            self.ctl.metrics.agents_connected.set(len(hub.conns))
            task = asyncio.get_running_loop().create_task(
                self._close_quietly(conn), name=f"agent-drop-{rec.name}")
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        rec.connected = False

    @staticmethod
    async def _close_quietly(conn: Any) -> None:
        try:
            await asyncio.wait_for(conn.close(), timeout=30)
        except (TimeoutError, Exception):
            pass

    def _end_on_lost_node(self, job: JobRecord, now: float, name: str) -> None:
        """End a job of a lost node: as its pending cancel or requeue asked, else as its
        requeue policy says (requeue, or NODE_FAIL)."""
        reason = f"node {name} failed"
        if job.cancel_requested:
            self.ctl.finish(job, JobState.CANCELLED, now, reason=job.end_reason or reason)
        elif job.requeue_requested:
            self.ctl.requeue_record(job, now, hold=job.requeue_hold)
        elif job.sub.spec.requeue:
            self.ctl.requeue_record(job, now)
            job.reason_detail = f"requeued: {reason}"
        else:
            self.ctl.finish(job, JobState.NODE_FAIL, now, reason=reason)

    async def check_timeouts(self, now: float) -> None:
        c = self.ctl.cfg.controller
        changed_jobs: list[JobRecord] = []
        # a controller whose own loop stalled has not read its agents' frames meanwhile:
        # give the readers one turn before calling connected agents silent
        stalled = self._last_check is not None and \
            now - self._last_check > min(c.tick_s, 1.0) + 2.0
        self._last_check = now
        for rec in self.nodes.values():
            if rec.last_seen is None or rec.power:  # power states: corral.controller.power
                continue
            if rec.connected:
                if stalled or not c.node_down_after_s or \
                        now - rec.last_seen < c.node_down_after_s:
                    continue
                self._lost(rec, now)
            if rec.state is not NodeState.DOWN and now - rec.last_seen >= c.node_down_after_s:
                log.warning("node %s: no heartbeat for %.0f s: DOWN", rec.name,
                            now - rec.last_seen)
                rec.state = node_transition(rec.state, NodeEvent.FAIL)
                rec.reason = "Not responding"
                rec.down_since = now
                self.ctl.metrics.set_nodes(self.nodes.values())
                self.ctl.sched.trigger()
                # a cancel or requeue that could not reach the agent needs nothing more
                # from it: done now (as for a job whose agent was away when asked)
                for jid in sorted(rec.jobs):
                    job = self.ctl.jobs.get(jid)
                    if job is not None and job.state.is_active and \
                            (job.cancel_requested or job.requeue_requested):
                        self._end_on_lost_node(job, now, rec.name)
                        changed_jobs.append(job)
            if rec.state is NodeState.DOWN and rec.down_since is not None and \
                    now - rec.down_since >= c.node_fail_grace_s and rec.jobs:
                for jid in sorted(rec.jobs):
                    job = self.ctl.jobs.get(jid)
                    if job is None or not job.state.is_active:
                        continue
                    self._end_on_lost_node(job, now, rec.name)
                    changed_jobs.append(job)
        if changed_jobs:
            await self.ctl.persist(updates=changed_jobs)
            self.ctl.sched.trigger()

    # ---- operator actions ------------------------------------------------------------

    def get(self, name: str) -> NodeRecord:
        rec = self.nodes.get(name)
        if rec is None:
            raise ApiError("not_found", f"Invalid node name specified: {name}",
                           slurm="Invalid node name specified")
        return rec

    def _audited(self, who: Identity | None, action: str, name: str,
                 details: dict[str, Any], fn: Callable[[], NodeRecord]) -> NodeRecord:
        """Run an operator action; with ``who``, record it (and a refusal) in the audit
        trail (``corral.controller.audit``)."""
        from corral.controller.audit import outcome_of, record

        try:
            rec = fn()
        except ApiError as exc:
            if who is not None:
                record(self.ctl.store, who, action, f"node {name}", details, outcome_of(exc))
            raise
        if who is not None:
            record(self.ctl.store, who, action, f"node {name}",
                   {**details, "state": rec.state.value})
        return rec

    def drain(self, name: str, reason: str, who: Identity | None = None, *,
              by_health: bool = False) -> NodeRecord:
        """Drain ``name``; ``by_health``: by a failed health check (a passing one may
        return it), else by an operator or a failed prolog/epilog (only an operator
        returns it)."""
        return self._audited(who, "drain", name, {"reason": reason},
                             lambda: self._drain(name, reason, by_health))

    def set_down(self, name: str, reason: str, who: Identity | None = None) -> NodeRecord:
        return self._audited(who, "down", name, {"reason": reason},
                             lambda: self._set_down(name, reason))

    def resume(self, name: str, who: Identity | None = None) -> NodeRecord:
        return self._audited(who, "resume", name, {}, lambda: self._resume(name))

    def _drain(self, name: str, reason: str, by_health: bool = False) -> NodeRecord:
        rec = self.get(name)
        if not reason:
            raise ApiError("invalid", "a reason is required to drain a node")
        rec.admin_state = "drain"
        rec.reason = reason
        rec.health_drained = by_health
        if rec.state is not NodeState.DOWN:
            rec.state = node_transition(rec.state, NodeEvent.DRAIN)
            self.refresh_load(rec)
        self._save(rec)
        self.ctl.metrics.set_nodes(self.nodes.values())
        return rec

    def _set_down(self, name: str, reason: str) -> NodeRecord:
        rec = self.get(name)
        rec.admin_state = "down"
        rec.health_drained = False
        rec.reason = reason or "set down by an operator"
        rec.state = node_transition(rec.state, NodeEvent.DOWN)
        rec.down_since = time.time()
        self._save(rec)
        self.ctl.metrics.set_nodes(self.nodes.values())
        return rec

    def _resume(self, name: str) -> NodeRecord:
        rec = self.get(name)
        if rec.state not in (NodeState.DRAINING, NodeState.DRAINED, NodeState.DOWN) and \
                not rec.admin_state:
            raise ApiError("conflict", f"node {name} is {rec.state.value}: nothing to resume")
        rec.admin_state = ""
        rec.reason = ""
        rec.health_drained = False
        rec.down_since = None
        if rec.state is NodeState.DOWN and not rec.connected:
            rec.state = NodeState.DOWN
            rec.reason = "Not responding"
        else:
            try:
                rec.state = node_transition(rec.state, NodeEvent.RESUME)
            except IllegalTransition:
                pass
            self.refresh_load(rec)
        self._save(rec)
        self.ctl.metrics.set_nodes(self.nodes.values())
        return rec

    def up_count(self) -> int:
        return sum(1 for n in self.nodes.values() if n.state.runs_jobs)

    def is_schedulable(self, name: str) -> bool:
        rec = self.nodes.get(name)
        return rec is not None and rec.state.schedulable and (
            rec.connected or rec.power in ("POWERED_DOWN", "POWERING_UP"))

    def job_states_on(self, name: str) -> list[JobState]:
        rec = self.nodes.get(name)
        if rec is None:
            return []
        return [self.ctl.jobs[j].state for j in rec.jobs if j in self.ctl.jobs]
