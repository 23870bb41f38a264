"""Agent connections: one WebSocket per node, batched frames, reconciliation on (re)connect.

Each connection has one writer task: messages queued while a frame is being sent go out
together in the next frame, so a burst of launches to one node costs one write. The
reader processes frames in order: ``exit`` messages are persisted and then acknowledged
(``ack``), so an exit is never lost between agent and database (the agent keeps it until
the ack; after a crash of either side it is reported again and recognised as already
applied).

Reconciliation (``hello``): the agent reports the runs its supervisors still hold
(``running``: job id + restart count) and exits not yet acknowledged. For every job the
database says RUNNING on this node:
- reported running with the same restart count: adopted;
- in the exits: applied as usual;
- unknown to the agent: the start was persisted but the launch never reached it (a crash
  between commit and send), so the launch is sent again; ``launch`` is idempotent by
  (job id, restart count) on the agent, so no job is ever started twice.
Every run the agent reports that the controller does not consider running (cancelled or
requeued while the agent was away) is killed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from corral.agent.launch import JobExit, LaunchRequest
from corral.controller.images import refresh_preferences
from corral.controller.jobscripts import end_unlaunched
from corral.controller.liveusage import live_samples
from corral.controller.records import JobRecord, images_from_agent
from corral.core.model.job import JobState
from corral.protocol.messages import (
    Encoded,
    ProtocolError,
    decode_frame,
    encode_frame,
    node_spec_from_json,
)

if TYPE_CHECKING:
    from corral.controller.service import Controller

log = logging.getLogger("corral.agents")


class AgentConn:
    def __init__(self, ws: Any, node: str) -> None:
        self.ws = ws
        self.node = node
        self.queue: asyncio.Queue[dict[str, Any] | Encoded] = asyncio.Queue()
        self.closed = False
        self.writer = asyncio.create_task(self._write(), name=f"agent-writer-{node}")
        self.frames_out = 0

    def send(self, msg: dict[str, Any] | Encoded) -> None:
        if not self.closed:
            self.queue.put_nowait(msg)

    async def _write(self) -> None:
        try:
            while True:
                msgs = [await self.queue.get()]
                while not self.queue.empty():
                    msgs.append(self.queue.get_nowait())
                await self.ws.send_text(encode_frame(msgs))
                self.frames_out += 1
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # connection gone: the reader notices too
            log.info("agent %s: send failed: %s", self.node, exc)
            self.closed = True

    async def close(self) -> None:
        self.closed = True
        self.writer.cancel()
        try:
            await self.writer
        except (asyncio.CancelledError, Exception):
            pass
        try:
            await self.ws.close()
        except Exception:
            pass


class AgentHub:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.conns: dict[str, AgentConn] = {}
        self.frames_in = 0  # frames received from agents (all connections)

    # ---- sending ----------------------------------------------------------------------

    def _conn_for(self, rec: JobRecord) -> AgentConn | None:
        """The connection of the job's first node (the one running its batch script)."""
        if rec.allocation is None:
            return None
        return self._conn(rec.allocation.nodes[0].node)

    def _conn(self, node: str) -> AgentConn | None:
        conn = self.conns.get(node)
        return conn if conn is not None and not conn.closed else None

    def _all_conns(self, rec: JobRecord) -> list[AgentConn]:
        """Connections of every node of the job's allocation (first node first)."""
        if rec.allocation is None:
            return []
        out = []
        for na in rec.allocation.nodes:
            conn = self._conn(na.node)
            if conn is not None:
                out.append(conn)
        return out

    def connected(self, rec: JobRecord) -> bool:
        return self._conn_for(rec) is not None

    def launch(self, rec: JobRecord, req: LaunchRequest,
               shares: list[tuple[str, LaunchRequest]] | None = None) -> None:
        """Start a run: the batch request to the first node and, for a job of several
        nodes, each other node's share of the job (``shares``: node, request)."""
        conn = self._conn_for(rec)
        if conn is not None:
            conn.send({"t": "launch", "req": req.to_json()})
        for node, share in shares or ():
            other = self._conn(node)
            if other is not None:
                other.send({"t": "launch", "req": share.to_json()})

    def cancel(self, rec: JobRecord, grace_s: int | None = None) -> None:
        """Stop a run on every node: SIGTERM now, SIGKILL after ``grace_s`` (default:
        KillWait)."""
        grace = self.ctl.cfg.controller.kill_grace_s if grace_s is None else grace_s
        for conn in self._all_conns(rec):
            conn.send({"t": "cancel", "job_id": rec.id, "restarts": rec.restarts,
                       "grace_s": grace})

    def release_shares(self, job_id: int, restarts: int, nodes: list[str]) -> None:
        """The job's run ended (its batch script exited, or it was requeued or failed):
        kill what is left of it on ``nodes`` at once, as Slurm kills a job's remaining
        steps when its batch script ends."""
        for node in nodes:
            conn = self._conn(node)
            if conn is not None:
                conn.send({"t": "cancel", "job_id": job_id, "restarts": restarts,
                           "grace_s": 0})

    def signal(self, rec: JobRecord, sig: str, batch_only: bool,
               steps_only: bool = False) -> None:
        conns = [self._conn_for(rec)] if batch_only else self._all_conns(rec)
        for conn in conns:
            if conn is not None:
                conn.send({"t": "signal", "job_id": rec.id, "signal": sig,
                           "batch_only": batch_only, "all_but_batch": steps_only})

    def suspend(self, rec: JobRecord) -> None:
        """Freeze a run on every node (preemption mode SUSPEND); its time limit clock
        pauses."""
        for conn in self._all_conns(rec):
            conn.send({"t": "suspend", "job_id": rec.id, "restarts": rec.restarts})

    def resume(self, rec: JobRecord) -> None:
        for conn in self._all_conns(rec):
            conn.send({"t": "resume", "job_id": rec.id, "restarts": rec.restarts})

    def time_limit(self, rec: JobRecord) -> None:
        conn = self._conn_for(rec)  # the first node enforces the job's limit
        if conn is not None:
            conn.send({"t": "time_limit", "job_id": rec.id, "time_limit_s": rec.time_limit_s})

    def step(self, rec: JobRecord, launch: dict[str, Any]) -> list[str]:
        """Send a step's launch to each of its nodes; returns the nodes not connected."""
        missing = []
        msg = Encoded({"t": "step", "job_id": rec.id, "restarts": rec.restarts,
                       "launch": launch})
        for node in launch["nodes"]:
            conn = self._conn(node)
            if conn is None:
                missing.append(node)
                continue
            conn.send(msg)
        return missing

    async def close_all(self) -> None:
        for conn in list(self.conns.values()):
            await conn.close()
        self.conns.clear()

    # ---- one connection ---------------------------------------------------------------

    async def serve(self, ws: Any) -> None:
        """Run one agent connection until it closes (``ws``: an accepted WebSocket)."""
        ctl = self.ctl
        try:
            hello_msgs = decode_frame(await ws.receive_text())
        except ProtocolError as exc:
            await ws.close(code=4400, reason=str(exc)[:120])
            return
        hello = hello_msgs[0] if hello_msgs else {}
        if hello.get("t") != "hello":
            await ws.close(code=4400, reason="the first message must be hello")
            return
        try:
            spec = node_spec_from_json(hello["node"])
            node = ctl.nodes.register(spec, str(hello.get("agent_version", "")),
                                      hello.get("boot_time"), peer=getattr(ws, "client", None),
                                      hostname=hello.get("hostname"))
        except Exception as exc:
            await ws.send_text(encode_frame([{"t": "reject", "message": str(exc)}]))
            await ws.close(code=4403, reason=str(exc)[:120])
            return
        name = node.name
        if ctl.cfg.power.enabled:
            ready = ctl.power.node_up(name)  # jobs that waited for this node's boot
            if ready:
                await ctl.persist(updates=ready)
        if isinstance(hello.get("images"), list):
            images = images_from_agent(hello["images"])
            if images != node.images:
                node.images = images
                refresh_preferences(ctl.pending_images.values(), ctl.nodes.nodes)
        if isinstance(hello.get("container_tools"), dict):
            node.container_tools = {str(k): str(v) for k, v in hello["container_tools"].items()}
        old = self.conns.pop(name, None)
        if old is not None:
            await old.close()
        conn = AgentConn(ws, name)
        self.conns[name] = conn
        ctl.metrics.agents_connected.set(len(self.conns))
        log.info("agent %s connected (%d running, %d exits to report)", name,
                 len(hello.get("running") or ()), len(hello.get("exits") or ()))
        conn.send({"t": "welcome", "node": name, "cluster": ctl.cfg.cluster_name,
                   "heartbeat_s": ctl.cfg.agent.heartbeat_s,
                   "kill_grace_s": ctl.cfg.controller.kill_grace_s})
        try:
            await self._reconcile(conn, hello)
            ctl.health.registered(name, time.time())
            ctl.sched.trigger()
            while True:
                try:
                    msgs = decode_frame(await ws.receive_text())
                except ProtocolError as exc:
                    log.warning("agent %s: bad frame: %s", name, exc)
                    continue
                ctl.nodes.seen(name)
                self.frames_in += 1
                await self._handle(conn, msgs)
        except Exception as exc:
            if type(exc).__name__ not in ("WebSocketDisconnect", "ConnectionClosed",
                                          "CancelledError"):
                log.warning("agent %s: connection error: %r", name, exc)
        finally:
            if self.conns.get(name) is conn:
                del self.conns[name]
                ctl.nodes.disconnected(name)
                ctl.prefetch.node_gone(name)
                ctl.metrics.agents_connected.set(len(self.conns))
                log.info("agent %s disconnected", name)
            await conn.close()

    async def _handle(self, conn: AgentConn, msgs: list[dict[str, Any]]) -> None:
        exits: list[JobExit] = []
        for m in msgs:
            t = m.get("t")
            if t == "exit":
                exits.append(JobExit.from_json(m["exit"]))
            elif t == "launched":
                rec = self.ctl.jobs.get(int(m["job_id"]))
                if rec is not None and rec.restarts == int(m.get("restarts", 0)):
                    rec.dispatched = True
            elif t == "launch_failed":
                if exits:
                    await self._apply_exits(conn, exits)
                    exits = []
                await self.ctl.on_launch_failed(conn.node, int(m["job_id"]),
                                                int(m.get("restarts", 0)),
                                                str(m.get("message", "")))
            elif t == "step_failed":
                log.warning("agent %s: step %s of job %s could not start: %s", conn.node,
                            m.get("step_id"), m.get("job_id"), m.get("message"))
            elif t == "health":
                self.ctl.health.result(conn.node, bool(m.get("ok")),
                                       str(m.get("message") or "")[:1000])
            elif t == "progress":  # a container job: pulling, then the image it runs
                rec = self.ctl.jobs.get(int(m["job_id"]))
                if rec is not None and rec.restarts == int(m.get("restarts", 0)) \
                        and rec.allocation is not None \
                        and rec.allocation.nodes[0].node == conn.node:
                    rec.container = str(m.get("note") or "")[:500]
                    rec.touch()
                    await self.ctl.persist(updates=[rec])
            elif t == "image_pull_state":  # pulls' progress and ends (early pulls)
                node = self.ctl.nodes.nodes.get(conn.node)
                if node is not None and isinstance(m.get("images"), list):
                    node.images = images_from_agent(m["images"])
                    if refresh_preferences(self.ctl.pending_images.values(),
                                           self.ctl.nodes.nodes):
                        self.ctl.sched.trigger()
                self.ctl.prefetch.report(conn.node, m.get("pulls"), time.time())
            elif t == "heartbeat":
                node = self.ctl.nodes.nodes.get(conn.node)
                if node is not None and isinstance(m.get("stats"), dict):
                    node.agent_stats = m["stats"]
                if node is not None:
                    node.live_usage = live_samples(m.get("usage"), time.time())
                if node is not None and isinstance(m.get("container_tools"), dict):
                    node.container_tools = {str(k)[:64]: str(v)[:200] for k, v in
                                            list(m["container_tools"].items())[:16]}
                if node is not None and isinstance(m.get("images"), list):
                    node.images = images_from_agent(m["images"])
                    if refresh_preferences(self.ctl.pending_images.values(),
                                           self.ctl.nodes.nodes):
                        self.ctl.sched.trigger()
            else:
                log.debug("agent %s: unknown message %r", conn.node, t)
        if exits:
            await self._apply_exits(conn, exits)

    async def _apply_exits(self, conn: AgentConn, exits: list[JobExit]) -> None:
        acks = await self.ctl.on_exits(conn.node, exits)
        for ex in acks:
            conn.send({"t": "ack", "job_id": ex.job_id, "restarts": ex.restarts})

    async def _reconcile(self, conn: AgentConn, hello: dict[str, Any]) -> None:
        ctl = self.ctl
        exits = []
        for e in hello.get("exits") or ():
            try:
                exits.append(JobExit.from_json(e))
            except Exception:
                log.exception("agent %s: ignoring an unreadable exit record", conn.node)
        if exits:
            await self._apply_exits(conn, exits)
        exited = {(e.job_id, e.restarts) for e in exits}
        reported = {int(r["job_id"]): int(r.get("restarts", 0))
                    for r in hello.get("running") or ()}
        relaunched = 0
        for rec in list(ctl.running.values()):
            try:  # one job that cannot be reconciled must not fail the handshake
                if rec.allocation is None:
                    continue
                if rec.allocation.nodes[0].node != conn.node:
                    if conn.node in rec.allocation.node_names and \
                            reported.get(rec.id) != rec.restarts and \
                            not (rec.cancel_requested or rec.requeue_requested):
                        share = ctl.sched.share_request(rec, conn.node)  # never reached it
                        if share is not None:
                            conn.send({"t": "launch", "req": share.to_json()})
                            relaunched += 1
                    elif reported.get(rec.id) == rec.restarts and rec.state is JobState.SUSPENDED:
                        self.suspend(rec)
                    continue
                if reported.get(rec.id) == rec.restarts:
                    rec.dispatched = True
                    if rec.cancel_requested or rec.requeue_requested:
                        self.cancel(rec)
                    elif rec.state is JobState.SUSPENDED:
                        self.suspend(rec)  # idempotent: covers a message lost in a crash
                    elif rec.suspended_s:
                        self.resume(rec)
                    continue
                if (rec.id, rec.restarts) in exited:
                    continue
                if rec.cancel_requested or rec.requeue_requested:
                    # it never ran here (or its exit is lost): end it as asked
                    end_unlaunched(ctl, rec, time.time())
                    await ctl.persist(updates=[rec])
                    continue
                conn.send({"t": "launch", "req": ctl.sched.launch_request(rec).to_json()})
                relaunched += 1
            except Exception:
                log.exception("agent %s: cannot reconcile job %d; left as it is",
                              conn.node, rec.id)
        for jid, restarts in reported.items():
            job = ctl.jobs.get(jid)
            alive = (job is not None and job.state.is_active and job.restarts == restarts
                     and job.allocation is not None
                     and conn.node in job.allocation.node_names)
            if not alive:
                log.warning("agent %s: killing orphan run %d (restart %d)", conn.node, jid,
                            restarts)
                conn.send({"t": "cancel", "job_id": jid, "restarts": restarts, "grace_s": 0})
        if relaunched:
            log.warning("agent %s: re-sent %d launches that never reached it", conn.node,
                        relaunched)
