"""The agent process: one persistent WebSocket out to the controller, jobs via JobRunner.

Why a WebSocket: the agent connects out (works across NAT; the controller needs no route
to nodes), one connection carries both directions with no per-message handshake, and it
rides the controller's HTTP port (or its Unix socket on the same host). Messages are
batched into frames (``corral.protocol``): a burst of 500 launches is a handful of frames.

Loop:
- connect (exponential backoff up to ``reconnect_max_s``), send ``hello`` with the node
  spec (discovered, names may be overridden), the runs its supervisors still hold
  (``JobRunner.running()`` re-adopts them after an agent restart) and every exit not yet
  acknowledged;
- handle ``launch`` (``JobRunner.launch``: idempotent by job id + restart count; answers
  ``launched`` or ``launch_failed``), ``cancel``, ``signal``, ``suspend``/``resume``
  (preemption mode SUSPEND; both idempotent), ``time_limit``, ``ack``;
- report exits when a supervisor notifies (the runner's datagram socket is watched by the
  event loop; ``exit_batch_s`` later, so a burst of ends shares a frame) plus a periodic
  sweep; keep each exit until the controller's ``ack``;
- heartbeat every ``heartbeat_s`` with the running list.
Killing the agent (even with SIGKILL) leaves the jobs running under their supervisors.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal as _signal
import time
from pathlib import Path
from typing import Any

from corral import __version__
from corral.agent import spool
from corral.agent.launch import JobExit, LaunchRequest
from corral.core.model.node import NodeSpec

USAGE_REPORT_MAX_PROCS = 4096  # processes read per heartbeat to split jobs into steps
USAGE_REPORT_MAX_JOBS = 512  # live samples per heartbeat (sstat); more jobs: the first ones

log = logging.getLogger("corral.agent")


def _boot_time() -> float | None:
    try:
        with open("/proc/stat") as fh:
            for line in fh:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except OSError:
        pass
    return None


class AgentDaemon:
    def __init__(self, controller: str | list[str], key: str, state_dir: Path, *,
                 node_name: str | None = None, cgroup_root: str | None = None,
                 heartbeat_s: float = 5.0, reconnect_max_s: float = 5.0,
                 pin_cpus: bool = True, isolation: str = "auto",
                 spec: NodeSpec | None = None, runner: Any = None,
                 exit_batch_s: float = 0.005, ca_file: str | None = None,
                 gpu_devices: tuple[str, ...] = (), containers: Any = None) -> None:
        """``runner``: a JobRunner-like object (default: a real ``JobRunner`` on
        ``state_dir``); benchmarks pass a no-op one to measure the control path alone.
        ``exit_batch_s``: after a supervisor's notification, wait this long for more
        before reporting, so a burst of ends travels in few frames (and the controller
        persists them in few commits).
        ``ca_file``: the cluster CA that a ``https://``/``wss://`` controller's certificate
        must be signed by (None: the system's trust store); jobs get it as
        ``CORRAL_CA_FILE``.
        ``gpu_devices``: the device file of each GPU, in index order (``[agent]
        gpu_devices``); default: the files NVML discovery found.
        ``containers``: the ``[containers]`` settings (``ContainersConfig``; default
        ones when None): runtime, image cache, registries.
        ``controller``: one address, or the controllers of an HA cluster (a list, or
        comma-separated): the agent connects to one; a standby closes the connection
        naming the leader, and the agent moves there (any other failure: the next one)."""
        from corral.agent.runner import JobRunner

        self.controllers = split_controllers(controller)
        if not self.controllers:
            raise ValueError("no controller address given")
        self.controller = self.controllers[0]
        self.ca_file = ca_file
        self.key = key
        self.state_dir = state_dir
        self.heartbeat_s = heartbeat_s
        self.exit_batch_s = exit_batch_s
        self.reconnect_max_s = reconnect_max_s
        self.pin_cpus = pin_cpus
        if spec is None:
            from corral.agent.discovery import discover_node

            spec = discover_node(node_name)
        elif node_name:
            import dataclasses

            spec = dataclasses.replace(spec, name=node_name)
        self.spec = spec
        self.node = spec.name
        state_dir.mkdir(parents=True, exist_ok=True)
        devices = ({i: p for i, p in enumerate(gpu_devices)} if gpu_devices
                   else {g.index: g.device for g in spec.gpus if g.device})
        from corral.agent.runtimes import settings as container_settings
        from corral.containers.config import ContainersConfig

        # container tools found once, at start (corral.agent.runtimes)
        self.containers = container_settings(containers or ContainersConfig(),
                                             str(state_dir), self.node)
        parent = (cgroup_root or "corral").strip("/").replace("/", "_")
        if parent != "corral":  # another agent tree on this host: its own runtime state too
            import dataclasses

            self.containers = dataclasses.replace(
                self.containers, state_root=f"{self.containers.state_root}.{parent}")
        self.runner = runner if runner is not None else JobRunner(
            state_dir, cgroup_root or "corral", self.node, isolation=isolation,
            gpu_devices=devices, containers=self.containers)
        self.unacked: dict[int, JobExit] = {}
        self._launched: list[dict[str, Any]] = []  # "launched" replies waiting for a flush
        self._request_flush: Any = None  # set during a session when exits are batched
        self.deferred: dict[int, LaunchRequest] = {}  # new runs waiting for an old run's end
        self._ws: Any = None
        self.node_addr = ""  # local address of the connection to the controller (TCP)
        self._out: asyncio.Queue[dict[str, Any]] | None = None
        self._stop = asyncio.Event()
        try:
            self._affinity = set(os.sched_getaffinity(0))
        except OSError:
            self._affinity = set()
        self._health_task: asyncio.Task[None] | None = None
        self._tools: dict[str, str] | None = None  # container tools' versions (a thread)
        self._tools_sent = False

        def probe() -> None:
            from corral.agent.runtimes import versions

            self._tools = versions(self.containers.tools)

        import threading

        threading.Thread(target=probe, name="container-tools", daemon=True).start()
        from corral.agent.pulls import Pulls

        self.pulls = Pulls(self.containers)  # image pull children (corral.agent.pulls)
        self._images_sent: list[dict[str, Any]] | None = None
        self.launches = 0
        self.launch_s = 0.0  # time spent in JobRunner.launch (reported in heartbeats)
        self.ack_s = 0.0
        self.poll_s = 0.0

    # ---- helpers ----------------------------------------------------------------------

    def _running(self) -> list[dict[str, int]]:
        runs = getattr(self.runner, "running_runs", None)
        if runs is not None:
            return [{"job_id": jid, "restarts": r} for jid, r in runs()]
        out = []
        for jid in self.runner.running():
            req = spool.read_json(spool.job_dir(self.runner.state_dir, jid) / spool.REQUEST)
            out.append({"job_id": jid, "restarts": int((req or {}).get("restarts", 0))})
        return out

    def _usage_report(self, running: list[dict[str, int]]) -> list[dict[str, Any]]:
        """What each running job uses now (CPU seconds so far, resident memory), for
        ``sstat``: the same sample as the agent's metrics (``agent_metrics.sample_job``).
        Never fails the heartbeat: a job that cannot be read is left out."""
        state_dir = getattr(self.runner, "state_dir", None)
        if state_dir is None or not running:
            return []
        try:
            from corral.agent.stepusage import batch_sample, split_processes, step_samples
            from corral.ops.agent_metrics import sample_job
        except ImportError:
            return []
        out: list[dict[str, Any]] = []
        budget = USAGE_REPORT_MAX_PROCS  # /proc/<pid>/environ reads for the steps
        for r in running[:USAGE_REPORT_MAX_JOBS]:
            try:
                s = sample_job(spool.job_dir(Path(state_dir), int(r["job_id"])))
            except Exception:  # noqa: BLE001 - a vanished /proc entry, a cgroup gone
                continue
            if s is None:
                continue
            entry: dict[str, Any] = {"job_id": s.job_id, "cpu_time_s": round(s.cpu_seconds, 3),
                                     "rss_mb": round(s.rss_bytes / 1048576, 3),
                                     "pids": sorted(s.pids)[:64]}
            steps: list[dict[str, Any]] = []
            if budget > 0:
                try:  # each step's share, and the batch script's own
                    groups, batch = split_processes(s.pids, min(budget, 512),
                                                    job_id=s.job_id, batch_pid=s.batch_pid)
                    steps = step_samples(s.pids, groups=groups)
                    if s.batch_pid:
                        entry["batch"] = batch_sample(batch)
                except Exception:  # noqa: BLE001 - a process gone mid-read
                    steps = []
                budget -= min(len(s.pids), 512)
            if steps:
                entry["steps"] = steps
            out.append(entry)
        return out

    def _send(self, msg: dict[str, Any]) -> None:
        if self._out is not None:
            self._out.put_nowait(msg)

    def _collect_exits(self) -> None:
        t0 = time.perf_counter()
        exits = self.runner.poll()
        self.poll_s += time.perf_counter() - t0
        progress = getattr(self.runner, "progress", None)
        for jid, restarts, note in progress() if progress is not None else ():
            self._send({"t": "progress", "job_id": jid, "restarts": restarts, "note": note})
        for ex in exits:
            self.unacked[ex.job_id] = ex
            self._send({"t": "exit", "exit": ex.to_json()})
        for ex in exits:
            req = self.deferred.get(ex.job_id)
            if req is not None and req.restarts != ex.restarts:
                del self.deferred[ex.job_id]
                self._launch(req)

    def _active_run(self, jid: int) -> int | None:
        """Restart count of the run of ``jid`` still active here, if any."""
        active_run = getattr(self.runner, "active_run", None)
        if active_run is not None:
            return active_run(jid)  # type: ignore[no-any-return]
        jdir = spool.job_dir(self.runner.state_dir, jid)
        if (jdir / spool.EXIT).exists():
            return None
        req = spool.read_json(jdir / spool.REQUEST)
        return None if req is None else int(req.get("restarts", 0))

    def _launch(self, req: LaunchRequest) -> None:
        """Start a run; a new run of a job whose older run is still being killed here
        (requeued while this agent was away) waits for that run's exit."""
        run = self._active_run(req.job_id)
        if run is not None and run != req.restarts:
            log.info("job %d: run %d waits for run %d to end", req.job_id, req.restarts, run)
            self.deferred[req.job_id] = req
            return
        t0 = time.perf_counter()
        try:
            self.runner.launch(req)
        except Exception as exc:
            log.warning("launch of job %d failed: %s", req.job_id, exc)
            self._send({"t": "launch_failed", "job_id": req.job_id,
                        "restarts": req.restarts, "message": str(exc)})
            return
        self.launches += 1
        self.launch_s += time.perf_counter() - t0
        launched = {"t": "launched", "job_id": req.job_id, "restarts": req.restarts}
        if self._request_flush is not None:  # with the next batch of exits (informational)
            self._launched.append(launched)
            self._request_flush()
        else:
            self._send(launched)

    def _fit_pinning(self, req: LaunchRequest) -> LaunchRequest:
        if not req.cpus:
            return req
        if not self.pin_cpus or (self._affinity and not set(req.cpus) <= self._affinity):
            import dataclasses

            # the configured node is larger than this machine (config override): no pinning
            return dataclasses.replace(req, cpus=(), cores=())
        return req

    def _with_contact(self, req: LaunchRequest) -> LaunchRequest:
        """Tell a job how its steps reach the controller and this node: ``CORRAL_URL``
        (this agent's controller, unless the job brought one) and ``CORRAL_NODE_ADDR``
        (the address this node reaches the controller from: srun's I/O listener); on
        the controller's own host, its socket (``CORRAL_SOCKET``) unless the job knows
        how to reach it already."""
        target = self.controller
        if target.startswith(("unix:", "/")):  # the controller's host: its socket
            if "CORRAL_SOCKET" in req.env or "CORRAL_URL" in req.env \
                    or "CORRAL_STATE_DIR" in req.env:
                return req
            env = dict(req.env)
            env["CORRAL_SOCKET"] = target[5:] if target.startswith("unix:") else target
        elif not self.node_addr:
            return req
        else:
            env = dict(req.env)
            env.setdefault("CORRAL_URL", self.controller_urls)
            if self.ca_file and env["CORRAL_URL"].startswith("https://"):
                env.setdefault("CORRAL_CA_FILE", self.ca_file)
            env["CORRAL_NODE_ADDR"] = self.node_addr
        import dataclasses

        return dataclasses.replace(req, env=env)

    @property
    def controller_url(self) -> str:
        return _http_url(self.controller)

    @property
    def controller_urls(self) -> str:
        """``CORRAL_URL`` for jobs: the controller connected to first, then the others."""
        urls = [self.controller_url] + [_http_url(c) for c in self.controllers
                                        if c != self.controller
                                        and not c.startswith(("unix:", "/"))]
        return ",".join(urls)

    def _next_controller(self, hint: str = "") -> None:
        """Move to the controller a standby named (``hint``), else to the next one."""
        if hint:
            for c in self.controllers:
                if _http_url(c) == _http_url(hint) or c == hint:
                    self.controller = c
                    return
            if hint.startswith(("http://", "https://")):
                self.controllers.append(hint)  # a leader this agent was not told about
                self.controller = hint
                return
        i = self.controllers.index(self.controller) if self.controller in self.controllers \
            else -1
        self.controller = self.controllers[(i + 1) % len(self.controllers)]

    def stats(self) -> dict[str, Any]:
        """Counters of the runner's costs, for the controller (node record ``agent_stats``)."""
        return {"launches": self.launches, "launch_s": round(self.launch_s, 6),
                "ack_s": round(self.ack_s, 6), "poll_s": round(self.poll_s, 6),
                "cpu_s": round(time.process_time(), 3), "pid": os.getpid()}

    def images_report(self, force: bool = False) -> list[dict[str, Any]] | None:
        """This node's image cache (``corral images``), or None when unchanged since the
        last report."""
        cache_dir = self.containers.cache_dir
        if not cache_dir or not os.path.isdir(os.path.join(cache_dir, "images")):
            rows: list[dict[str, Any]] = []
        else:
            from corral.agent.images import ImageCache

            try:
                rows = ImageCache(cache_dir, self.containers.cache_max_mb).entries()
            except OSError:
                rows = []
        if not force and rows == self._images_sent:
            return None
        self._images_sent = rows
        return rows

    def _tools_report(self, force: bool = False) -> dict[str, str] | None:
        """The container tools and their versions once the probe is done (sent once)."""
        if self._tools is None:
            return {k: "" for k in self.containers.tools} if force else None
        if self._tools_sent and not force:
            return None
        self._tools_sent = True
        return dict(self._tools)

    def pull_image(self, ref: str, uid: Any = None, gid: Any = None,
                   early: bool = False) -> None:
        """``corral image pull`` (``early``: the controller's pull of a pending job's
        image, which leaves a cached one as it is): a child process fills the cache (the
        agent's loop never waits for a registry); a SIF is opened with ``uid``/``gid``."""
        why = self.pulls.start(ref, uid, gid, early=early)
        if why:
            log.warning("image pull of %s refused: %s", ref, why)

    def _report_pulls(self) -> None:
        """Send the pulls' progress and ends (``image_pull_state``); with the image list
        when one ended, so the controller sees the image as soon as it is there."""
        if not len(self.pulls) and not self.pulls.pending_refusals():
            return
        changes = self.pulls.poll()
        if not changes:
            return
        msg: dict[str, Any] = {"t": "image_pull_state", "pulls": changes}
        if any(c["state"] == "done" for c in changes):
            images = self.images_report(force=True)
            msg["images"] = images or []
        self._send(msg)

    # ---- message handling -------------------------------------------------------------

    def handle(self, msg: dict[str, Any]) -> None:
        t = msg.get("t")
        if t == "launch":
            self._launch(self._with_contact(self._fit_pinning(
                LaunchRequest.from_json(msg["req"]))))
        elif t == "cancel":
            jid = int(msg["job_id"])
            restarts = msg.get("restarts")
            waiting = self.deferred.get(jid)
            if waiting is not None and restarts is not None and waiting.restarts == int(restarts):
                # cancelled before it could start: report the end at once
                del self.deferred[jid]
                now = time.time()
                self._send({"t": "exit", "exit": JobExit(
                    job_id=jid, state="CANCELLED", start_time=now, end_time=now,
                    reason="cancelled before it started", restarts=waiting.restarts).to_json()})
                return
            run = self._active_run(jid)
            if run is not None and restarts is not None and run != int(restarts):
                return  # meant for another run of this job, which is not running here
            grace = msg.get("grace_s")
            self.runner.cancel(jid, None if grace is None else int(grace))
        elif t == "signal":
            from corral.agent.proctree import signal_number

            try:
                sig = signal_number(msg["signal"])
            except (ValueError, KeyError) as exc:
                log.warning("bad signal %r: %s", msg.get("signal"), exc)
                return
            self.runner.signal(int(msg["job_id"]), sig,
                               batch_only=bool(msg.get("batch_only")),
                               all_but_batch=bool(msg.get("all_but_batch")))
        elif t in ("suspend", "resume"):  # preemption mode SUSPEND
            jid = int(msg["job_id"])
            restarts = msg.get("restarts")
            run = self._active_run(jid)
            if run is None or (restarts is not None and run != int(restarts)):
                return
            if t == "suspend":
                self.runner.suspend(jid)
            else:
                self.runner.resume(jid)
        elif t == "step":
            jid, restarts = int(msg["job_id"]), int(msg.get("restarts", 0))
            launch = msg.get("launch") or {}
            step = getattr(self.runner, "step", None)
            if step is None or not step(jid, restarts, launch):
                self._send({"t": "step_failed", "job_id": jid, "restarts": restarts,
                            "step_id": launch.get("step_id"),
                            "message": f"job {jid} is not running on {self.node}"})
        elif t == "image_pull":
            self.pull_image(str(msg.get("ref", "")), msg.get("uid"), msg.get("gid"),
                            early=bool(msg.get("early")))
        elif t == "time_limit":
            self.runner.update_time_limit(int(msg["job_id"]), msg.get("time_limit_s"))
        elif t == "ack":
            jid = int(msg["job_id"])
            ex = self.unacked.get(jid)
            if ex is not None and ex.restarts != int(msg.get("restarts", ex.restarts)):
                return
            self.unacked.pop(jid, None)
            t0 = time.perf_counter()
            try:
                self.runner.ack(jid)
            except Exception as exc:
                log.warning("ack of job %d: %s", jid, exc)
            self.ack_s += time.perf_counter() - t0
        elif t == "health_check":
            self._health_check(str(msg.get("program") or ""),
                               float(msg.get("timeout_s") or 60))
        elif t == "welcome":
            self.heartbeat_s = float(msg.get("heartbeat_s", self.heartbeat_s))
            if msg.get("node") and msg["node"] != self.node:
                log.warning("controller knows this node as %s", msg["node"])
        elif t == "reject":
            log.error("the controller refused this agent: %s", msg.get("message"))

    def _health_check(self, program: str, timeout_s: float) -> None:
        """Run the controller's HealthCheckProgram (one at a time) and answer ``health``."""
        if not program or (self._health_task is not None and not self._health_task.done()):
            return

        async def check() -> None:
            ok, message = await run_health_program(program, timeout_s, self.node)
            if not ok:
                log.warning("health check %s failed: %s", program, message)
            self._send({"t": "health", "ok": ok, "message": message})

        self._health_task = asyncio.get_running_loop().create_task(check())

    # ---- connection -------------------------------------------------------------------

    async def _connect(self) -> Any:
        from websockets.asyncio.client import connect, unix_connect

        headers = {"Authorization": f"Bearer {self.key}"}
        # keepalive: a controller that answers no ping for 3 heartbeats, and at least 10 s
        # (stopped, hung, or the link cut with the TCP connection still open here), is
        # given up on, and the loop in run() reconnects instead of waiting on a dead
        # connection forever; the floor keeps a controller busy with a long commit from
        # making every agent reconnect
        opts: dict[str, Any] = {"additional_headers": headers, "max_size": 256 * 1024 * 1024,
                                "ping_interval": self.heartbeat_s,
                                "ping_timeout": max(3 * self.heartbeat_s, 10.0),
                                "close_timeout": min(10.0, self.heartbeat_s),
                                "compression": None, "open_timeout": 10, "proxy": None}
        target = self.controller
        if target.startswith(("unix:", "/")):
            path = target[5:] if target.startswith("unix:") else target
            return await unix_connect(path, "ws://localhost/api/v1/agent", **opts)
        base = target.rstrip("/")
        if base.startswith("http://"):
            base = "ws://" + base[7:]
        elif base.startswith("https://"):
            base = "wss://" + base[8:]
        elif not base.startswith(("ws://", "wss://")):
            base = "ws://" + base
        if base.startswith("wss://"):
            from corral.tls import client_context

            opts["ssl"] = client_context(self.ca_file)
        return await connect(base + "/api/v1/agent", **opts)

    async def _session(self, ws: Any) -> None:
        from corral.protocol.messages import decode_frame, encode_frame, node_spec_to_json

        self._collect_exits()
        self._images_sent = None
        hello = {"t": "hello", "node": node_spec_to_json(self.spec),
                 "images": self.images_report(force=True) or [],
                 "container_tools": self._tools_report(force=True) or {},
                 "running": self._running(),
                 "exits": [e.to_json() for e in self.unacked.values()],
                 "agent_version": __version__, "boot_time": _boot_time(), "pid": os.getpid(),
                 "hostname": os.uname().nodename}
        await ws.send(encode_frame([hello]))
        out: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._out = out
        loop = asyncio.get_running_loop()

        async def writer() -> None:
            while True:
                msgs = [await out.get()]
                while not out.empty():
                    msgs.append(out.get_nowait())
                await ws.send(encode_frame(msgs))

        async def heartbeat() -> None:
            while True:
                await asyncio.sleep(self.heartbeat_s)
                beat: dict[str, Any] = {"t": "heartbeat", "running": self._running(),
                                        "time": time.time(), "stats": self.stats()}
                images = self.images_report()
                if images is not None:
                    beat["images"] = images
                tools = self._tools_report()
                if tools is not None:
                    beat["container_tools"] = tools
                usage = self._usage_report(beat["running"])
                if usage:
                    beat["usage"] = usage
                self._send(beat)

        async def sweeper() -> None:
            while True:
                await asyncio.sleep(0.25)
                self._collect_exits()
                self._report_pulls()

        fd = self.runner.fileno()
        batch = getattr(self.runner, "batch", contextlib.nullcontext)
        flush: list[asyncio.TimerHandle] = []
        watching = [True]

        def flush_now() -> None:
            flush.clear()
            launched, self._launched = self._launched, []
            for msg in launched:
                self._send(msg)
            self._collect_exits()
            if not watching[0]:
                loop.add_reader(fd, notified)
                watching[0] = True

        def request_flush() -> None:
            if not flush:
                flush.append(loop.call_later(self.exit_batch_s, flush_now))

        def notified() -> None:
            # the datagrams stay unread until the flush: stop watching until then
            loop.remove_reader(fd)
            watching[0] = False
            request_flush()

        if self.exit_batch_s > 0:
            loop.add_reader(fd, notified)
            self._request_flush = request_flush
        else:
            loop.add_reader(fd, self._collect_exits)
        tasks = [asyncio.create_task(writer()), asyncio.create_task(heartbeat()),
                 asyncio.create_task(sweeper())]
        try:
            async for frame in ws:
                with batch():
                    for msg in decode_frame(frame):
                        self.handle(msg)
                if any(t.done() for t in tasks):
                    break
        finally:
            loop.remove_reader(fd)
            for handle in flush:
                handle.cancel()
            self._request_flush = None
            self._launched.clear()
            self._out = None
            for t in tasks:
                t.cancel()
            for t in tasks:
                try:
                    await t
                except (asyncio.CancelledError, Exception):
                    pass

    async def run(self) -> None:
        delay = 0.05
        standby_delay = 0.01
        while not self._stop.is_set():
            try:
                ws = await self._connect()
            except Exception as exc:
                import ssl

                if isinstance(exc, ssl.SSLCertVerificationError):
                    log.error("the controller at %s presented a certificate that %s does "
                              "not vouch for (%s); pass --ca-file (the cluster's ca.pem) "
                              "(retry in %.1f s)", self.controller,
                              self.ca_file or "the system's trust store",
                              exc.verify_message, delay)
                else:
                    log.info("cannot reach the controller at %s: %s (retry in %.1f s)",
                             self.controller, exc, delay)
                self._next_controller()
                if self.controller == self.controllers[0] or len(self.controllers) == 1:
                    await self._sleep(delay)  # once around the list: back off
                    delay = min(delay * 2, self.reconnect_max_s)
                continue
            delay = 0.05
            try:
                local = ws.local_address
                self.node_addr = str(local[0]) if isinstance(local, tuple) else ""
            except Exception:  # noqa: BLE001 - unix socket or no transport info
                self.node_addr = ""
            log.info("connected to %s as node %s", self.controller, self.node)
            try:
                await self._session(ws)
            except Exception as exc:
                if getattr(ws, "close_code", None) != NOT_LEADER_CLOSE:
                    log.info("connection lost: %r", exc)
            finally:
                try:
                    await ws.close()
                except Exception:
                    pass
            reason = str(getattr(ws, "close_reason", "") or "")
            if getattr(ws, "close_code", None) == NOT_LEADER_CLOSE:
                hint = reason.partition(" ")[2].strip()
                log.debug("%s is a standby controller; the leader is %s", self.controller,
                          hint or "not known yet")
                self._next_controller(hint)
                await self._sleep(standby_delay)  # a failover under way: short pauses
                standby_delay = min(standby_delay * 2, 0.1)
                continue
            standby_delay = 0.01
            if len(self.controllers) > 1:
                self._next_controller()  # the leader went away: try the others
            await self._sleep(delay)

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stop.wait(), timeout=seconds)
        except TimeoutError:
            pass

    def stop(self) -> None:
        self._stop.set()


NOT_LEADER_CLOSE = 4409  # a standby controller's close code (corral.controller.roles)


async def run_health_program(program: str, timeout_s: float, node: str) -> tuple[bool, str]:
    """Run a HealthCheckProgram: (passed, its message: the last line of its output, else
    its exit status). No search path is set, as in Slurm; ``SLURMD_NODENAME`` is."""
    try:
        proc = await asyncio.create_subprocess_exec(
            program, env={"SLURMD_NODENAME": node}, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True, cwd="/")
    except OSError as exc:
        return False, f"HealthCheckProgram {program}: {exc.strerror or exc}"
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout=timeout_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, _signal.SIGKILL)
        await proc.wait()
        return False, f"HealthCheckProgram timed out after {timeout_s:.0f} s"
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, _signal.SIGKILL)
    lines = [ln.strip() for ln in out[-8192:].decode(errors="replace").splitlines()
             if ln.strip()]
    code = proc.returncode or 0
    if code == 0:
        return True, lines[-1][:200] if lines else ""
    status = f"exit {code}" if code > 0 else f"killed by signal {-code}"
    return False, lines[-1][:200] if lines else f"HealthCheckProgram failed ({status})"


def split_controllers(controller: str | list[str]) -> list[str]:
    """Controller addresses from ``--controller`` values (each may be a comma list)."""
    items = [controller] if isinstance(controller, str) else list(controller)
    out: list[str] = []
    for item in items:
        for part in item.split(","):
            part = part.strip()
            if part and part not in out:
                out.append(part)
    return out


def _http_url(target: str) -> str:
    base = target.rstrip("/")
    if base.startswith("ws://"):
        return "http://" + base[5:]
    if base.startswith("wss://"):
        return "https://" + base[6:]
    return base if base.startswith(("http://", "https://", "unix:", "/")) else "http://" + base


def run_agent(controller: str | list[str], key: str, state_dir: Path, **kwargs: Any) -> None:
    """Run an agent until SIGINT/SIGTERM (blocking). Jobs keep running after it exits."""
    from corral.agent.proctree import set_process_name

    set_process_name("corral-agent")  # its fork server is corral-forksrv, supervisors corral-sup
    daemon = AgentDaemon(controller, key, state_dir, **kwargs)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (_signal.SIGINT, _signal.SIGTERM):
            loop.add_signal_handler(sig, daemon.stop)
        gc.collect()  # the startup heap lives as long as the process: not walked again
        gc.freeze()
        task = asyncio.create_task(daemon.run())
        await daemon._stop.wait()
        task.cancel()
        try:
            await task
        except (asyncio.CancelledError, Exception):
            pass

    try:
        asyncio.run(main())
    finally:
        daemon.runner.close()
