"""``JobRunner``: the node-local job launcher the agent daemon drives.

Each job runs under its own supervisor process (``supervisor.py``), forked by the
runner's fork server (``zygote.py``: a small process started once, so a fork copies
about 12 MB instead of the agent's ~100 MB) and starting its own session at once: no
signal aimed at the agent's process group or terminal reaches it, and when the agent or
the fork server dies (even by SIGKILL) init adopts it, so jobs keep running while the
agent is restarted. The spool (``spool.py``) is the only shared state: the runner writes
``request.json`` and queues commands in ``ctl/`` (then wakes the supervisor with
SIGUSR1); the supervisor claims the run by creating ``status.json`` and writes, once,
``exit.json``. A restarted ``JobRunner`` on the same state directory re-adopts every job
whose supervisor is alive, hands runs that were never claimed to its fork server again,
and reports every exit that was not yet acknowledged, including exits that happened while
no agent ran.

``launch`` does no more than a message's worth of work in the agent: an in-memory check,
``mkdir`` + ``request.json``, one datagram to the fork server. It never waits for the
supervisor; a job that cannot start comes back as a FAILED exit through ``poll``.

Notifications: the runner binds an abstract-namespace datagram socket named after the
state directory; supervisors send the job id when they wrote the exit, so ``wait()`` (or
``fileno()`` in an event loop) wakes the daemon at once. Without it, ``poll()`` still
notices everything in its periodic sweep (every ``sweep_s``), which also detects
supervisors that died without an exit record (reported as NODE_FAIL).

Guarantees: ``launch`` is idempotent for the same ``(job_id, restarts)``: a repeated
request never starts the job twice (the runner remembers every run in its spool, and the
supervisor's exclusive claim covers a launch delivered twice). Every exit is reported by
``poll`` exactly once per runner instance and stays on disk until ``ack(job_id)``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import pwd
import select
import shutil
import signal
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.agent import cgslot, pbsaux, spool
from corral.agent.cgroups import CgroupLayout, JobCgroup
from corral.agent.isolation import node_layout
from corral.agent.launch import JobExit, LaunchRequest
from corral.agent.prepare import parse_warning_signal
from corral.agent.proctree import forget_dirs, in_dir, is_alive, kill_pids
from corral.agent.runtimes import ContainerSettings
from corral.agent.stepfeed import StepFeeds
from corral.agent.supervisor import encode_job
from corral.agent.vm import job as vmjob
from corral.agent.zygote import ForkServer

_STARTUP_GRACE_S = 30.0  # a job dir with a request but no supervisor claim yet
_GROUPS_TTL_S = 60.0
_RCVBUF = 4 << 20  # exit notifications of a burst of jobs fit without loss
_BATCH_MAX = 200  # launches per message to the fork server (well under a socket buffer)


class LaunchError(ValueError):
    """The runner cannot accept this request (e.g. the job is already running here)."""


@dataclass
class _Sup:
    pid: int
    ticks: int | None


class JobRunner:
    def __init__(self, state_dir: Path | str, cgroup_root: str = "corral",
                 node_name: str | None = None, *, isolation: str = "auto",
                 mem_poll_s: float = 1.0, sweep_s: float = 0.5, spool_dir: str = "auto",
                 gpu_devices: dict[int, str] | None = None,
                 containers: ContainerSettings | None = None) -> None:
        """``spool_dir``: where job directories live (``spool.open_spool``: "auto" puts
        them on a memory filesystem when there is one, "state" under ``state_dir``).
        ``gpu_devices``: this node's GPU device files by GPU index; a job cannot open those
        of GPUs it was not given (``corral.agent.devices``)."""
        if isolation not in ("auto", "cgroup", "none"):
            raise ValueError(f"isolation must be auto, cgroup or none, not {isolation!r}")
        self.state_dir = Path(state_dir).resolve()
        self.node_name = node_name or socket.gethostname().split(".")[0]
        self.cgroup_root = cgroup_root.strip("/") or "corral"
        # job cgroups: <cgroup_root>/<node>/sup_<pid> (a supervisor's, cgslot.py) or
        # .../job_<id>, so several agents on one kernel (test clusters, multi-node jobs on
        # emulated nodes) never share a job's cgroup
        self.cgroup_parent = f"{self.cgroup_root}/{self.node_name.replace('/', '_')}"
        self.isolation = isolation
        self.gpu_devices = dict(gpu_devices or {})
        self.mem_poll_s = mem_poll_s
        self.sweep_s = sweep_s
        self._jobs_dir = str(spool.open_spool(self.state_dir, spool_dir))
        self.feeds = StepFeeds(self.node_name, self._jobs_dir)
        self.layout = (node_layout(self.cgroup_parent) if isolation != "none"
                       else CgroupLayout("none", reason="isolation disabled"))
        if self.layout.mode != "none":  # cgroups kept by supervisors that are gone
            cgslot.remove_stale(self.layout, self.cgroup_parent)
        digest = hashlib.sha1(str(self.state_dir).encode()).hexdigest()[:24]
        self._addr = b"\0corral-agent-" + digest.encode()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        try:
            self._sock.bind(self._addr)
        except OSError as exc:
            self._sock.close()
            raise LaunchError(f"another agent already uses state directory {self.state_dir} "
                              f"({exc})") from None
        self._sock.setblocking(False)
        for opt in (getattr(socket, "SO_RCVBUFFORCE", None), socket.SO_RCVBUF):
            if opt is None:
                continue
            try:
                self._sock.setsockopt(socket.SOL_SOCKET, opt, _RCVBUF)
                break
            except OSError:
                continue
        self.containers = containers or ContainerSettings()
        self._zygote = ForkServer({
            "node_name": self.node_name, "cgroup_root": self.cgroup_parent,
            "isolation": isolation, "notify": self._addr.hex(), "mem_poll_s": mem_poll_s,
            "script_log": str(self.state_dir / "scripts.log"),
            "containers": self.containers.to_text()})
        self._runs: dict[int, int] = {}  # every run in the spool: job id -> restarts
        self._active: dict[int, _Sup | None] = {}  # runs not reported finished yet
        self._unclaimed: dict[int, bytes] = {}  # sent to the fork server, no claim seen
        self._batch: list[bytes] | None = None
        self._pending: set[int] = set()
        self._reported: set[int] = set()
        self._last_sweep = 0.0
        self._groups: dict[tuple[int, int], tuple[float, tuple[int, ...]]] = {}
        self._own_groups = set(os.getgroups()) | {os.getegid()}
        self._aux = pbsaux.aux_dir(str(self.state_dir))
        self._nodefiles: dict[int, str] = {}  # qsub jobs: PBS_NODEFILE, removed on ack
        self._progress: set[int] = set()  # jobs whose supervisor reported progress
        self.adopted: list[int] = []
        self._adopt()

    # ---- public API -----------------------------------------------------------------------
    def launch(self, req: LaunchRequest) -> None:
        """Start ``req`` under a new supervisor; returns without waiting for it.

        Per-job problems (another uid while not root, bad --signal, missing workdir, ...)
        end the job FAILED with a reason, reported by ``poll``. Raises ``LaunchError`` only
        when a different run of the same job id is still active here.
        """
        jid = req.job_id
        known = self._runs.get(jid)
        if known is not None:
            if known == req.restarts:
                return  # the same run: launching twice must not start it twice
            if jid in self._active and not self._exited(jid):
                raise LaunchError(f"job {jid} (run {known}) is still running on "
                                  f"{self.node_name}")
            self._forget(jid)
        jdir = os.path.join(self._jobs_dir, str(jid))
        try:  # 0700: request.json holds the job's environment (tokens, secrets)
            os.mkdir(jdir, 0o700)
        except FileExistsError:  # debris of a run this runner never knew: replace it
            shutil.rmtree(jdir, ignore_errors=True)
            os.mkdir(jdir, 0o700)
        if self.gpu_devices:
            hidden = tuple(path for index, path in sorted(self.gpu_devices.items())
                           if index not in req.gpus)
            if hidden:
                req = dataclasses.replace(req, hidden_devices=hidden)
        if pbsaux.KEY in req.extra:
            req = pbsaux.write_nodefile(req, self._aux)
            self._nodefiles[jid] = req.env["PBS_NODEFILE"]
        spool.write_json(os.path.join(jdir, spool.REQUEST), req.to_json())
        self._runs[jid] = req.restarts
        self._start(jid, req, jdir)

    def _start(self, jid: int, req: LaunchRequest, jdir: str) -> None:
        refusal, groups, switch = self._check(req)
        if refusal:
            now = time.time()
            spool.write_json(os.path.join(jdir, spool.EXIT), JobExit(
                job_id=jid, state="FAILED", exit_code=1, start_time=now, end_time=now,
                reason=refusal, restarts=req.restarts).to_json())
            self._active.pop(jid, None)
            self._pending.add(jid)
            return
        msg = encode_job(jdir, jid, req.restarts, groups, switch)
        self.feeds.started(jid, req, groups, switch)
        self._active[jid] = None
        self._unclaimed[jid] = msg
        if self._batch is not None:
            self._batch.append(msg)
        elif not self._zygote.send(msg):
            self._restart_zygote()

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Launches inside go to the fork server together, when the block ends (one
        message, one wake-up for a frame of launches)."""
        if self._batch is not None:  # nested: the outer block sends
            yield
            return
        self._batch = []
        try:
            yield
        finally:
            msgs, self._batch = self._batch, None
            for i in range(0, len(msgs), _BATCH_MAX):
                chunk = msgs[i:i + _BATCH_MAX]
                data = chunk[0] if len(chunk) == 1 else b"[" + b",".join(chunk) + b"]"
                if not self._zygote.send(data):
                    self._restart_zygote()  # resends everything not claimed
                    break

    def poll(self) -> list[JobExit]:
        """Jobs that finished since the last poll, each reported once (until ``ack``)."""
        ids = self._drain()
        now = time.monotonic()
        sweep = now - self._last_sweep >= self.sweep_s
        if sweep:
            self._last_sweep = now
            if not self._zygote.alive():
                self._restart_zygote()
            ids |= set(self._active)
        ids |= self._pending
        out: list[JobExit] = []
        for jid in sorted(ids):
            if jid in self._reported:
                continue
            jdir = os.path.join(self._jobs_dir, str(jid))
            rec = spool.read_json(os.path.join(jdir, spool.EXIT))
            if rec is None:
                if not (sweep and jid in self._active) or self._supervisor_alive(jid):
                    continue
                rec = spool.read_json(os.path.join(jdir, spool.EXIT))  # it may have just ended
                if rec is None:
                    rec = self._node_fail(jid, "the job's supervisor process died")
            self._active.pop(jid, None)
            self._unclaimed.pop(jid, None)
            self._pending.discard(jid)
            self._reported.add(jid)
            out.append(JobExit.from_json(rec))
        return out

    def progress(self) -> list[tuple[int, int, str]]:
        """``(job id, restarts, note)`` of the container jobs whose supervisor reported
        progress since the last call (pulling, then the image it runs); read after
        ``poll``, which takes the notifications in."""
        ids, self._progress = self._progress, set()
        out = []
        for jid in sorted(ids):
            st = self.status(jid) or {}
            notes = [str(n) for n in st.get("notes") or []
                     if str(n).startswith(("pulling ", "unpacking ", "container "))]
            if notes and jid in self._runs:
                out.append((jid, self._runs[jid], notes[-1][:500]))
        return out

    def ack(self, job_id: int) -> bool:
        """Forget a finished job (its spool directory goes). False if unknown."""
        if job_id not in self._runs:
            return False
        if not self._exited(job_id):
            raise LaunchError(f"job {job_id} is still running on {self.node_name}")
        self._forget(job_id)
        return True

    def signal(self, job_id: int, sig: int, *, batch_only: bool = False,
               all_but_batch: bool = False) -> bool:
        """Send ``sig`` to every process of the job (only the batch shell with
        ``batch_only``; all but it with ``all_but_batch``, Slurm's ``scancel --signal``
        default). False when the job is not running here."""
        return self._command(job_id, {"cmd": "signal", "sig": int(sig), "batch_only": batch_only,
                                      "all_but_batch": all_but_batch})

    def step(self, job_id: int, restarts: int, launch: dict[str, Any]) -> bool:
        """Hand one ``srun`` step's launch to the job's supervisor here, which starts this
        node's tasks (``corral.agent.stepd``). False when that run is not active here."""
        if self._runs.get(job_id) != restarts:
            return False
        if self.feeds.send(job_id, restarts, launch):  # straight to the job's step server
            return True
        return self._command(job_id, {"cmd": "step", "launch": launch})

    def cancel(self, job_id: int, grace_s: int | None = None) -> bool:
        """SIGCONT+SIGTERM to the job's whole process tree, SIGKILL after ``grace_s``
        (default: the request's ``kill_grace_s``); the job ends CANCELLED."""
        return self._command(job_id, {"cmd": "cancel", "grace_s": grace_s})

    def suspend(self, job_id: int) -> bool:
        """Freeze every process of the job (cgroup freezer, else SIGSTOP); suspended time
        does not count against the time limit. False when the job is not running here."""
        return self._command(job_id, {"cmd": "suspend"})

    def resume(self, job_id: int) -> bool:
        return self._command(job_id, {"cmd": "resume"})

    def update_time_limit(self, job_id: int, time_limit_s: int | None) -> bool:
        """New time limit, counted from the job's start (None: unlimited)."""
        return self._command(job_id, {"cmd": "time_limit", "time_limit_s": time_limit_s})

    def running(self) -> list[int]:
        """Ids of jobs whose supervisor has not written an exit yet."""
        return sorted(j for j in self._active if not self._exited(j))

    def running_runs(self) -> list[tuple[int, int]]:
        """``(job id, restarts)`` of every run whose supervisor has not written an exit."""
        return [(j, self._runs[j]) for j in self.running()]

    def active_run(self, job_id: int) -> int | None:
        """Restart count of the run of ``job_id`` still active here (no exit reported)."""
        if job_id in self._active and not self._exited(job_id):
            return self._runs.get(job_id)
        return None

    def status(self, job_id: int) -> dict[str, Any] | None:
        """The supervisor's status record (pids, output files, isolation), if any."""
        return spool.read_json(os.path.join(self._jobs_dir, str(job_id), spool.STATUS))

    def wait(self, timeout_s: float) -> bool:
        """Block until a supervisor reports something (or ``timeout_s``); True if so."""
        if self._pending - self._reported:
            return True
        ready, _, _ = select.select([self._sock], [], [], max(0.0, timeout_s))
        return bool(ready)

    def fileno(self) -> int:
        """Readable when a supervisor reported something (for event loops)."""
        return self._sock.fileno()

    @property
    def fork_server_pid(self) -> int | None:
        return self._zygote.pid

    def close(self) -> None:
        self._sock.close()
        self._zygote.close()
        spool.close_spool(self.state_dir)

    def __enter__(self) -> JobRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals ------------------------------------------------------------------------
    def _exited(self, jid: int) -> bool:
        return os.path.exists(os.path.join(self._jobs_dir, str(jid), spool.EXIT))

    def _adopt(self) -> None:
        base = self._jobs_dir
        for name in os.listdir(base):
            if name.startswith(".gate-"):  # a supervisor's spawn FIFOs (spawn.py)
                pid = name.split("-")[1]
                if pid.isdigit() and not is_alive(int(pid)):
                    shutil.rmtree(os.path.join(base, name), ignore_errors=True)
                continue
            if not name.isdigit():
                continue
            jid = int(name)
            jdir = os.path.join(base, name)
            req = spool.read_json(os.path.join(jdir, spool.REQUEST))
            if req is None:  # the agent died between mkdir and the request: nothing started
                shutil.rmtree(jdir, ignore_errors=True)
                continue
            self._runs[jid] = int(req.get("restarts", 0))
            nodefile = pbsaux.nodefile_of(req)
            if nodefile:
                self._nodefiles[jid] = nodefile
            if os.path.exists(os.path.join(jdir, spool.EXIT)):
                self._pending.add(jid)
                continue
            self._active[jid] = self._sup_record(jid)
            self.adopted.append(jid)
            if self._active[jid] is None:  # never claimed: the launch may have been lost
                try:
                    self._start(jid, LaunchRequest.from_json(req), jdir)
                except (TypeError, ValueError) as exc:
                    self._node_fail(jid, f"unreadable launch request: {exc}")
                    self._pending.add(jid)
        self.adopted.sort()

    def _restart_zygote(self) -> None:
        """The fork server died: start another one and resend what was never claimed (a
        supervisor forked just before the death loses the claim to its twin, or wins it)."""
        self._zygote.restart()
        for jid, msg in list(self._unclaimed.items()):
            if jid not in self._active or self._sup_record(jid) is not None:
                self._unclaimed.pop(jid, None)
                continue
            self._zygote.send(msg)

    def _sup_record(self, jid: int) -> _Sup | None:
        rec = spool.read_json(os.path.join(self._jobs_dir, str(jid), spool.STATUS))
        if rec and rec.get("supervisor_pid"):
            ticks = rec.get("supervisor_ticks")
            return _Sup(int(rec["supervisor_pid"]), int(ticks) if ticks is not None else None)
        return None

    def _supervisor_alive(self, jid: int) -> bool:
        sup = self._active.get(jid) or self._sup_record(jid)
        if sup is not None:
            self._active[jid] = sup
            self._unclaimed.pop(jid, None)
            return is_alive(sup.pid, sup.ticks)
        try:  # not claimed yet: give a queued or just-forked supervisor time to appear
            age = time.time() - os.stat(os.path.join(self._jobs_dir, str(jid),
                                                     spool.REQUEST)).st_mtime
        except FileNotFoundError:
            return False
        return age < _STARTUP_GRACE_S

    def _node_fail(self, jid: int, reason: str) -> dict[str, Any]:
        """The supervisor vanished: kill what is left of the job, record NODE_FAIL."""
        jdir = Path(self._jobs_dir) / str(jid)
        status = spool.read_json(jdir / spool.STATUS) or {}
        req = spool.read_json(jdir / spool.REQUEST) or {}
        iso = status.get("isolation") or {}
        cg_data = iso.get("cgroup") if isinstance(iso, dict) else None
        if isinstance(cg_data, dict):
            cg = JobCgroup.from_describe(cg_data)
            try:
                cg.kill_all()
                cg.remove(wait_s=1.0)
            except OSError:
                pass
        job_pid = int(status.get("job_pid") or 0)
        ticks = status.get("job_ticks")
        if job_pid and is_alive(job_pid, int(ticks) if ticks is not None else None):
            try:
                os.killpg(job_pid, signal.SIGKILL)
            except OSError:
                kill_pids([job_pid], signal.SIGKILL)
        rec = JobExit(job_id=jid, state="NODE_FAIL", exit_code=0,
                      start_time=float(status.get("start_time") or 0.0), end_time=time.time(),
                      reason=reason, stdout_path=str(status.get("stdout") or ""),
                      stderr_path=str(status.get("stderr") or ""),
                      restarts=int(req.get("restarts") or 0)).to_json()
        spool.write_json(jdir / spool.EXIT, rec)
        return rec

    def _forget(self, jid: int) -> None:
        jdir = os.path.join(self._jobs_dir, str(jid))
        try:  # the usual files; anything else (ctl/, a profile) falls back to rmtree
            for name in (spool.EXIT, spool.STATUS, spool.REQUEST):
                try:
                    in_dir(os.path.join(jdir, name),
                           lambda n, dfd: os.unlink(n, dir_fd=dfd))
                except FileNotFoundError:
                    pass
            forget_dirs(jdir)
            os.rmdir(jdir)
        except FileNotFoundError:
            pass
        except OSError:
            shutil.rmtree(jdir, ignore_errors=True)
        self._runs.pop(jid, None)
        self.feeds.forget(jid)
        if self._nodefiles:
            pbsaux.remove(self._nodefiles.pop(jid, None))
        self._active.pop(jid, None)
        self._unclaimed.pop(jid, None)
        self._pending.discard(jid)
        self._reported.discard(jid)

    def _command(self, jid: int, cmd: dict[str, Any]) -> bool:
        jdir = Path(self._jobs_dir) / str(jid)
        if jid not in self._active or self._exited(jid):
            return False
        spool.post_command(jdir, cmd)
        sup = self._active.get(jid) or self._sup_record(jid)
        if sup is not None:  # not claimed yet: the supervisor reads ctl/ before it starts
            self._active[jid] = sup
            if is_alive(sup.pid, sup.ticks):
                try:
                    os.kill(sup.pid, signal.SIGUSR1)
                except ProcessLookupError:
                    pass
        return True

    def _drain(self) -> set[int]:
        ids: set[int] = set()
        while True:
            try:
                data = self._sock.recv(64)
            except (BlockingIOError, InterruptedError):
                return ids
            except OSError:
                return ids
            if data.isdigit():
                ids.add(int(data))
            elif data[:1] == b"p" and data[1:].isdigit():  # progress (a container pull)
                self._progress.add(int(data[1:]))

    def _check(self, req: LaunchRequest) -> tuple[str, tuple[int, ...], bool]:
        """(refusal reason or "", supplementary groups, switch user?)."""
        if not os.path.isabs(req.workdir):
            return f"working directory must be an absolute path, got {req.workdir!r}", (), False
        if req.script is None and not req.argv and req.extra.get("share") != "1":
            return "nothing to run: the request has neither a script nor a command", (), False
        if req.signal:
            try:
                parse_warning_signal(req.signal)
            except ValueError as exc:
                return str(exc), (), False
        euid = os.geteuid()
        if euid != 0:
            if req.uid != euid:
                me = _user_name(euid)
                return (f"the agent on {self.node_name} runs as uid {euid} ({me}) and cannot "
                        f"start jobs as uid {req.uid} ({req.user}); run the agent as root to "
                        "run jobs as their submitting users"), (), False
            return "", (), False
        groups = self._supplementary_groups(req)
        if vmjob.is_vm(req):  # the VM launcher's qemu opens /dev/kvm as the user
            kvm = vmjob.kvm_gid()
            if kvm is not None and kvm not in groups:
                groups = (*groups, kvm)
        if req.uid == euid and req.gid == os.getegid() and set(groups) == self._own_groups:
            return "", groups, False  # the agent's own identity: nothing to switch
        return "", groups, True

    def _supplementary_groups(self, req: LaunchRequest) -> tuple[int, ...]:
        key = (req.uid, req.gid)
        now = time.monotonic()
        hit = self._groups.get(key)
        if hit is not None and now - hit[0] < _GROUPS_TTL_S:
            return hit[1]
        try:
            name = pwd.getpwuid(req.uid).pw_name
            groups = tuple(os.getgrouplist(name, req.gid))
        except (KeyError, OSError):
            groups = (req.gid,)
        self._groups[key] = (now, groups)
        return groups


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
