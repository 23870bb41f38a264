"""Power saving and elastic cloud nodes (Slurm's power-saving model; ``[power]``).

A node's power state (``NodeRecord.power``): ``""`` (on), ``POWERED_DOWN``,
``POWERING_UP``, ``POWERING_DOWN``; sinfo prints them as the suffixes ``~``, ``#``, ``%``.

- A powered-down node is planned on like an idle one (the scheduling core sees it IDLE),
  so a job is queued for it and never refused. When a cycle starts a job on such nodes,
  ``resume_program`` runs once for them (their host list as its argument) and they are
  POWERING_UP; the job is allocated, CONFIGURING (``JobRecord.configuring``: its state
  is RUNNING, the shown state CONFIGURING, ``CF`` in squeue; sacct shows RUNNING, as
  Slurm's accounting keeps the base state) and its launch reaches each node when its
  agent registers (the hello reconciliation sends launches that never reached a node).
  When the last of its nodes registered it stops CONFIGURING and its start time is reset
  to then (``node_up``), as Slurm does. A node not registered within ``resume_timeout_s`` goes
  DOWN (``ResumeTimeout reached``) and its jobs are requeued (or NODE_FAIL).
- A node idle for ``suspend_time_s`` (connected, no jobs, no operator state, not in
  ``suspend_exc_nodes`` or a ``suspend_exc_parts`` partition) is powered down:
  ``suspend_program`` runs with the host list and the node is POWERING_DOWN (no new
  work) for ``suspend_timeout_s``, then POWERED_DOWN. Its agent going away meanwhile is
  expected: a node in any power state never goes DOWN for not responding.
- ``[[nodes]] cloud = true`` (``State=CLOUD``): a node that does not exist until resumed;
  it starts POWERED_DOWN.
- ``scontrol update nodename=N state=power_down|power_up`` runs the programs at once.
- ``boot_time_s`` > 0: a powered-down node is planned as available only that long after
  a resume (``corral.core.boot``, ``ClusterSnapshot.boot_ready``), a powering-up one from
  its expected ready time: nothing starts on them before their agents register, waiting
  jobs' estimated starts include the boot, and ``plan`` resumes just the nodes that the
  cycle's planned starts (``Reserve``) need. 0 (the default) keeps Slurm's model above.
- ``resume_rate`` / ``suspend_rate`` (Slurm's ``ResumeRate``/``SuspendRate``, nodes per
  minute, 0: no limit) bound how many nodes are resumed / powered down in any 60 s
  (``RateWindow``): when more are due, the first go (the nodes of the jobs started first;
  the nodes idle longest) and the rest wait in order until the window has room again
  (checked every tick). A node waiting for its resume whose job went away is not resumed.
  Operator actions go at once and count in the window.

The programs run on the controller's host as its user, stdin ``/dev/null``, output to the
controller's log, killed after the timeouts (``corral.controller.jobscripts.run_program``);
they must not keep their standard output open (start daemons with ``setsid ... >log
2>&1 &``). Power states are stored with the node and survive a controller restart.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from corral.config.power import PowerConfig
from corral.controller.errors import ApiError
from corral.controller.records import JobRecord, NodeRecord
from corral.core.decisions import Reserve
from corral.core.model.node import NodeState

if TYPE_CHECKING:
    from corral.controller.service import Controller

log = logging.getLogger("corral.power")

POWERED_DOWN = "POWERED_DOWN"
POWERING_UP = "POWERING_UP"
POWERING_DOWN = "POWERING_DOWN"
SUFFIX = {POWERED_DOWN: "~", POWERING_UP: "#", POWERING_DOWN: "%"}


class RateWindow:
    """At most ``per_min`` actions in any ``window_s`` seconds (a sliding window over the
    times of the last ones); ``per_min`` is read per call, so a reload applies at once.
    Pure: time is an argument."""

    def __init__(self, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self._times: deque[float] = deque()

    def room(self, per_min: int, now: float) -> int | None:
        """How many may go now; None: no limit."""
        if per_min <= 0:
            return None
        while self._times and self._times[0] <= now - self.window_s:
            self._times.popleft()
        return max(0, per_min - len(self._times))

    def take(self, count: int, per_min: int, now: float) -> int:
        """How many of ``count`` go now (recorded as gone)."""
        room = self.room(per_min, now)
        n = count if room is None else min(count, room)
        self.note(n, now)
        return n

    def note(self, count: int, now: float) -> None:
        """``count`` went now whatever the limit (operator actions)."""
        self._times.extend([now] * count)
        while len(self._times) > 100_000:  # an unlimited rate keeps no long history
            self._times.popleft()


class PowerManager:
    def __init__(self, ctl: Controller, clock: Callable[[], float] = time.time) -> None:
        self.ctl = ctl
        self.clock = clock  # wall-clock seconds (a test passes its own)
        self._resume: dict[str, None] = {}  # due for a resume, in order (ResumeRate)
        self._wanted: set[str] = set()  # boot_time_s: the nodes the last plan needs
        self.resume_window = RateWindow()
        self.suspend_window = RateWindow()

    @property
    def cfg(self) -> PowerConfig:
        return self.ctl.cfg.power

    # ---- starts ------------------------------------------------------------------------

    def started(self, rec: JobRecord) -> None:
        """A job was allocated: the powered-down nodes it got are to be resumed, and the
        job is CONFIGURING until they are all up."""
        if rec.allocation is None:
            return
        for name in rec.allocation.node_names:
            node = self.ctl.nodes.nodes.get(name)
            if node is not None and node.power == POWERED_DOWN:
                self._resume[name] = None
        rec.configuring = False  # a flag left from an earlier run (requeued) goes
        self._mark_configuring(rec)

    def _booting(self, rec: JobRecord) -> bool:
        nodes = self.ctl.nodes.nodes
        return rec.allocation is not None and any(
            n in nodes and nodes[n].power in (POWERED_DOWN, POWERING_UP)
            for n in rec.allocation.node_names)

    def _mark_configuring(self, rec: JobRecord) -> None:
        if not rec.configuring and rec.state.is_active and self._booting(rec):
            rec.configuring = True
            rec.touch()

    def node_up(self, name: str, now: float | None = None) -> list[JobRecord]:
        """A node registered: its jobs whose nodes are now all up stop CONFIGURING, and
        their start time is reset to now, as Slurm does after a node power up (the boot
        counts neither in the elapsed time nor against the time limit). Returns them,
        changed, for the caller to persist."""
        node = self.ctl.nodes.nodes.get(name)
        if node is None:
            return []
        now = self.clock() if now is None else now
        out: list[JobRecord] = []
        for jid in sorted(node.jobs):
            rec = self.ctl.jobs.get(jid)
            if rec is None or not rec.configuring or self._booting(rec):
                continue
            rec.configuring = False
            if rec.start_time is not None and rec.end_time is None:
                rec.start_time = max(rec.start_time, now)
            rec.touch()
            out.append(rec)
        return out

    @property
    def waiting(self) -> list[str]:
        """Nodes due for a resume that wait for room in ``resume_rate``."""
        return list(self._resume)

    def flush(self, now: float | None = None) -> None:
        """Resume the nodes the starts need (one program run), as many as ``resume_rate``
        lets go now; the others stay due, in order, for a later call (every tick)."""
        if not self._resume:
            return
        now = self.clock() if now is None else now
        nodes = self.ctl.nodes.nodes
        due = [n for n in self._resume if n in nodes and nodes[n].power == POWERED_DOWN
               and (nodes[n].jobs or n in self._wanted)]
        n = self.resume_window.take(len(due), self.cfg.resume_rate, now)
        go, rest = due[:n], due[n:]
        self._resume = dict.fromkeys(rest)
        if rest:
            log.info("ResumeRate %d/min: %d node(s) wait for the next minute: %s",
                     self.cfg.resume_rate, len(rest), ",".join(rest))
        if go:
            self.resume(sorted(go), now)

    # ---- boot time in the plan (boot_time_s > 0) ------------------------------------------

    def boot_ready(self, now: float) -> dict[str, float]:
        """``ClusterSnapshot.boot_ready``: when each powered-down node would be ready if
        resumed now, and when each powering-up one is expected (``corral.core.boot``).
        Empty with ``boot_time_s = 0``: powered-down nodes are then planned as idle."""
        cfg = self.cfg
        if not cfg.enabled or not self._boot_planned():
            return {}
        out: dict[str, float] = {}
        for node in self.ctl.nodes.nodes.values():
            if node.power not in (POWERED_DOWN, POWERING_UP):
                continue
            boot_s = self.boot_time_s(node.name)
            if boot_s <= 0:
                continue
            if node.power == POWERED_DOWN and not node.jobs:
                out[node.name] = now + boot_s
            elif node.power == POWERING_UP and not node.connected:
                resumed = (node.power_deadline or now) - cfg.resume_timeout_s
                out[node.name] = max(now + 1.0, resumed + boot_s)
        return out

    def boot_time_s(self, name: str) -> int:
        """The node's ``[[nodes]] boot_time_s``, else ``[power] boot_time_s``."""
        conf = self.ctl.nodes.configured.get(name)
        if conf is not None and conf.boot_time_s is not None:
            return int(conf.boot_time_s)
        return self.cfg.boot_time_s

    def _boot_planned(self) -> bool:
        return self.cfg.boot_time_s > 0 or any(
            c.boot_time_s for c in self.ctl.nodes.configured.values())

    def plan(self, reservations: Iterable[Reserve], now: float) -> None:
        """Resume the powered-down nodes that the cycle's planned starts need by the time
        they would be ready (``core.boot.nodes_to_resume``); a node no plan needs any
        more is not resumed (if ``resume_rate`` kept it waiting)."""
        cfg = self.cfg
        if not cfg.enabled or not self._boot_planned():
            return
        from corral.core.boot import nodes_to_resume

        down = {n.name: now + self.boot_time_s(n.name) for n in self.ctl.nodes.nodes.values()
                if n.power == POWERED_DOWN and not n.jobs and self.boot_time_s(n.name) > 0}
        want = nodes_to_resume(reservations, down, now,
                               max(1.0, float(self.ctl.cfg.scheduler.bf_resolution_s)))
        self._wanted = set(want)
        for name in want:
            self._resume.setdefault(name, None)
        self.flush(now)

    def resume(self, names: list[str], now: float | None = None) -> None:
        if not self.cfg.resume_program:
            log.warning("nodes %s need resuming but [power] resume_program is not set",
                        names)
            return
        now = self.clock() if now is None else now
        for name in names:
            node = self.ctl.nodes.nodes[name]
            node.power = POWERING_UP
            node.power_deadline = now + self.cfg.resume_timeout_s
            self.ctl.nodes.save(node)
        self._run(self.cfg.resume_program, names, "resume", self.cfg.resume_timeout_s)

    def suspend(self, names: list[str], now: float | None = None) -> None:
        now = self.clock() if now is None else now
        for name in names:
            node = self.ctl.nodes.nodes[name]
            node.power = POWERING_DOWN
            node.power_deadline = now + self.cfg.suspend_timeout_s
            node.idle_since = None
            self.ctl.nodes.save(node)
        self._run(self.cfg.suspend_program, names, "suspend", self.cfg.suspend_timeout_s)
        self.ctl.sched.trigger()

    def _run(self, prog: str, names: list[str], what: str, timeout_s: float) -> None:
        from corral.controller.jobscripts import run_program, spawn
        from corral.core.parse.hostlist import compress

        hosts = compress(names)
        log.info("%s %s: %s %s", what, hosts, prog, hosts)

        async def go() -> None:
            ok, how = await run_program(prog, {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                                               "SLURM_CLUSTER_NAME": self.ctl.cfg.cluster_name},
                                        timeout_s, (hosts,), keep_children=True)
            if not ok:
                log.warning("%s program %s %s failed: %s", what, prog, hosts, how)

        spawn(go(), f"power-{what}")

    # ---- time --------------------------------------------------------------------------

    def excluded(self, node: NodeRecord) -> bool:
        from corral.core.parse.hostlist import expand

        cfg = self.cfg
        if cfg.suspend_exc_nodes and node.name in expand(cfg.suspend_exc_nodes):
            return True
        return any(p in cfg.suspend_exc_parts for p in node.partitions)

    async def tick(self, now: float) -> None:
        cfg = self.cfg
        if not cfg.enabled:
            return
        nodes = self.ctl.nodes
        failed: list[JobRecord] = []
        idle: list[str] = []
        for node in list(nodes.nodes.values()):
            if node.power in (POWERED_DOWN, POWERING_UP):  # also after a restart
                for jid in node.jobs:
                    job = self.ctl.jobs.get(jid)
                    if job is not None:
                        self._mark_configuring(job)
            if node.power == POWERING_UP and not node.connected and \
                    node.power_deadline is not None and now >= node.power_deadline:
                log.warning("node %s: not registered %d s after its resume: DOWN",
                            node.name, cfg.resume_timeout_s)
                node.power = ""
                node.state = NodeState.DOWN
                node.reason = "ResumeTimeout reached"
                node.down_since = now
                nodes.save(node)
                for jid in sorted(node.jobs):
                    job = self.ctl.jobs.get(jid)
                    if job is not None and job.state.is_active:
                        nodes.end_on_lost_node(job, now, node.name)
                        failed.append(job)
            elif node.power == POWERING_DOWN and node.power_deadline is not None and \
                    now >= node.power_deadline:
                node.power = POWERED_DOWN
                node.power_deadline = None
                node.connected = False
                node.state = NodeState.IDLE
                node.reason = ""
                nodes.save(node)
                self.ctl.sched.trigger()
            elif node.power == "" and cfg.suspend_time_s is not None:
                busy = node.jobs or node.state is not NodeState.IDLE or node.admin_state \
                    or not node.connected
                if busy:
                    node.idle_since = None
                elif node.idle_since is None:
                    node.idle_since = now
                elif now - node.idle_since >= cfg.suspend_time_s and not self.excluded(node):
                    idle.append(node.name)
        self.flush(now)  # the resumes that waited for room in resume_rate
        if idle:
            # the nodes idle longest first; the rest wait for room in suspend_rate
            idle.sort(key=lambda n: (nodes.nodes[n].idle_since or now, n))
            idle = idle[:self.suspend_window.take(len(idle), cfg.suspend_rate, now)]
        if idle:
            self.suspend(idle, now)
        if failed:
            await self.ctl.persist(updates=failed)
            self.ctl.sched.trigger()

    # ---- operator actions ----------------------------------------------------------------

    def operator(self, name: str, action: str) -> NodeRecord:
        node = self.ctl.nodes.get(name)
        if action == "up":
            if node.power != POWERED_DOWN:
                raise ApiError("conflict", f"node {name} is not powered down")
            self._resume.pop(name, None)
            self.resume_window.note(1, self.clock())
            self.resume([name])
        elif action == "down":
            if node.power:
                raise ApiError("conflict", f"node {name} is already {node.power.lower()}")
            if node.jobs:
                raise ApiError("conflict", f"node {name} runs jobs; drain it first")
            if not self.cfg.suspend_program:
                raise ApiError("invalid", "[power] suspend_program is not set")
            self.suspend_window.note(1, self.clock())
            self.suspend([name])
        else:
            raise ApiError("invalid", f"unknown power action {action!r} (up, down)")
        return node
