"""The controller's state and operations: intake, job actions, agent events, recovery.

One asyncio event loop owns all of this state (no locks). Active jobs live in memory
(``pending`` and ``running`` maps, plus recently finished ones for ``min_job_age_s``); the
store is the durable log. Every change follows the same path: mutate the record, queue
its row to the store, and act outside (answer the caller, message an agent) only after the
commit future resolved ("persist first, then dispatch"). Scheduling lives in
``scheduler.py``; the agent connections in ``agents.py``; job actions (cancel, hold,
release, requeue, update) in ``actions.py``; job steps in ``steps.py``; preemption by
suspension in ``suspend.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from corral.agent.launch import JobExit
from corral.config.schema import ClusterConfig
from corral.controller import allocations, intake
from corral.controller.auth import Identity
from corral.controller.errors import ApiError, is_number, job_number
from corral.controller.heapfreeze import HeapFreezer
from corral.controller.images import image_of
from corral.controller.metrics import Metrics
from corral.controller.nodes import NodeTable
from corral.controller.records import JobRecord
from corral.controller.rows import insert_row, record_from_row, update_row
from corral.controller.runtimes import normalize_runtime
from corral.controller.sharing import EnvPool, SubmissionPool
from corral.controller.steps import close_open_steps
from corral.controller.store import Store
from corral.controller.suspend import end_suspension
from corral.controller.warm import WarmState
from corral.core.model.job import HoldKind, JobState
from corral.core.model.transitions import JobEvent, job_transition
from corral.core.snapshot import FinishedJob

log = logging.getLogger("corral.controller")
_FINISHED = frozenset(s for s in JobState if s.is_finished)

_EXIT_EVENTS = {
    "COMPLETED": JobEvent.COMPLETE, "FAILED": JobEvent.FAIL, "TIMEOUT": JobEvent.TIMEOUT,
    "CANCELLED": JobEvent.CANCEL, "OUT_OF_MEMORY": JobEvent.OOM,
    "NODE_FAIL": JobEvent.NODE_FAIL, "PREEMPTED": JobEvent.PREEMPT_CANCEL,
    "BOOT_FAIL": JobEvent.BOOT_FAIL, "DEADLINE": JobEvent.DEADLINE,
}


class Controller:
    def __init__(self, cfg: ClusterConfig, state_dir: Path, store: Store,
                 cycle_fn: Callable[..., Any] | None = None) -> None:
        self.cfg = cfg
        self.config_path: Path | None = None  # the corral.toml it runs with (reload)
        self.state_dir = state_dir
        self.store = store
        self.host = socket.gethostname().split(".")[0]
        # mints a job's API token (CORRAL_TOKEN in its environment) when the API is on
        # TCP, so srun in a job on another host can reach the controller (server.py)
        self.token_minter: Callable[[str, int, int, int], str] | None = None
        self.jobs: dict[int, JobRecord] = {}  # active + recently finished
        self.pending: dict[int, JobRecord] = {}
        # the pending jobs that run in a cached image (registry or SIF): the only ones
        # whose preferred nodes change when a node's image cache does
        self.pending_images: dict[int, JobRecord] = {}
        self.envs = EnvPool()  # one copy of the environments jobs share (sharing.py)
        self.running: dict[int, JobRecord] = {}
        self.suspended: set[int] = set()  # SUSPENDED jobs (preemption mode SUSPEND)
        # not root: jobs run only as this user (intake refuses others at submit)
        self.single_uid: int | None = os.geteuid() if os.geteuid() != 0 else None
        self.recent: deque[int] = deque()  # finished ids in end order
        # array id -> task ids held in self.jobs (an ordered set: O(1) removal as tasks of a
        # large array are pruned)
        self.arrays: dict[int, dict[int, None]] = {}
        self.finished: dict[int, FinishedJob] = {}  # end states other jobs may depend on
        from corral.controller.jobindex import JobIndex

        self.index = JobIndex()  # self.jobs by user and by name (status queries)
        from corral.controller.arraytail import ArrayTail

        self.tails: dict[int, ArrayTail] = {}  # large arrays' compact remainders
        from corral.controller.usage import UsageLedger

        self.ledger = UsageLedger(cfg.account_tree(), cfg.scheduler.decay_half_life_s)
        from corral.controller.ids import IdAllocator
        from corral.controller.submitkeys import SubmitKeys

        self.ids = IdAllocator(store)
        from corral.controller.events import EventLog

        self.events = EventLog(store)
        self._events_pruned = 0.0
        self.keys = SubmitKeys()
        self.metrics = Metrics()
        self.nodes = NodeTable(self)
        self.default_partition = next(
            (p.name for p in self.nodes.partitions if p.is_default),
            self.nodes.partitions[0].name if self.nodes.partitions else "")
        from corral.controller.agents import AgentHub
        from corral.controller.scheduler import SchedulerLoop

        self.hub = AgentHub(self)
        self.sched = SchedulerLoop(self, cycle_fn)
        from corral.controller.health import HealthChecks
        from corral.controller.livecfg import LiveConfig
        from corral.controller.power import PowerManager
        from corral.controller.reservations import ReservationTable

        self.power = PowerManager(self)
        from corral.controller.prefetch import Prefetcher

        self.prefetch = Prefetcher(self)  # early pulls of pending jobs' images

        self.health = HealthChecks(self)
        from corral.client import SOCKET_NAME
        from corral.controller.check_task import PeriodicChecks

        self.periodic_checks = PeriodicChecks(
            lambda: self.cfg.checks, self.state_dir,
            lambda: Path(self.cfg.controller.socket or self.state_dir / SOCKET_NAME))
        self.reservations = ReservationTable(self)
        from corral.controller.nodehistory import NodeHistory

        self.history_log = NodeHistory(self)  # node states, reservations (sreport)
        from corral.controller.mail_arrays import ArrayMail
        from corral.controller.mail_limits import TimeLimitMail

        self.mail_limits = TimeLimitMail(self)
        self.mail_arrays = ArrayMail(self)
        from corral.controller.outbox import Outbox

        self.outbox = Outbox(self)  # job mail owed, sent, retried (outbox.py)
        self.livecfg = LiveConfig(self)
        self.started_at = time.time()
        # high availability: this controller's role and its peers, for ``/ping``
        # (``corral.controller.roles.Gate.role_json``)
        self.ha_view: Callable[[], dict[str, Any]] | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self.load_s = 0.0  # how long start() took to load the state
        self.term_over = asyncio.Event()  # set by stop(): requests of this term end
        self._term_end: asyncio.Future[None] | None = None  # term_end(): the same, a future
        # the per-user request limiter (``corral.controller.ratelimit``; set by the server)
        self.limiter: Any = None
        self.heap = HeapFreezer(cfg.controller.gc_freeze_s, cfg.controller.gc_full_s)

    @property
    def usage(self) -> dict[tuple[str, str], float]:
        """Fair-share usage per (account, user), decayed to now, running jobs included."""
        return self.ledger.view(time.time(), self.running.values())

    # ---- lifecycle ------------------------------------------------------------------

    async def start(self, warm: WarmState | None = None) -> None:
        """Load the state and start scheduling. ``warm``: a standby's copy of the active
        jobs and submit keys (``corral.controller.warm``), brought up to date here
        instead of loading and parsing every active job again.

        Python's cyclic garbage collector is off while the state loads and the loaded
        objects are frozen afterwards (``gc.freeze``): a load builds a few objects per
        job field and nothing of it is garbage, yet each full collection walked every
        object made so far (100,000 pending jobs: load 6.6-10.9 s with it, 5.4 s
        without), and every later full collection walked them all again, about 0.5 s a
        time at 100,000 jobs, landing in whatever ran then (a scheduling cycle, a
        request). Frozen objects are still freed by reference counting when their job
        goes; a reference cycle among them outlives its job until the next full
        collection of ``self.heap`` (``controller.heapfreeze``, which also freezes what
        was made since, every ``gc_freeze_s``)."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            await self._start(warm)
        finally:
            if enabled:
                gc.enable()
        gc.freeze()

    async def _start(self, warm: WarmState | None) -> None:
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()
        await loop.run_in_executor(None, self.store.open)
        from corral.controller import livecfg

        try:  # accounts, users, QOS, partition states changed at run time (sacctmgr)
            self.livecfg.load_json(await loop.run_in_executor(
                None, self.store.get_meta, livecfg.META_KEY))
        except (ValueError, TypeError, KeyError, ApiError):
            log.exception("ignoring an unreadable record of run-time configuration changes")
        self.nodes.load(await loop.run_in_executor(None, self.store.load_nodes))
        key_rows: list[Any] | None = None
        if warm is not None and warm.ready:
            recs, key_rows = await loop.run_in_executor(None, warm.catch_up)
        else:  # read and parse off the loop (it renews the lease meanwhile)
            recs = await loop.run_in_executor(None, self._load_active_records)
        for k, rec in enumerate(recs):
            if k % 2000 == 1999:
                await asyncio.sleep(0)  # a long table: let the lease renewals run
            self._index(rec)
            if rec.state.is_active:
                self.nodes.allocate(rec)
                if rec.state is JobState.SUSPENDED:
                    self.nodes.suspend(rec)
        from corral.controller.arraytail import tail_from_row

        tails_top = 0  # the last id reserved by a large array (pending or cancelled)
        for row in await loop.run_in_executor(None, self.store.load_tails):
            tail = tail_from_row(row)
            tails_top = max(tails_top, tail.array_job_id + len(tail.indices) - 1)
            if tail.state is JobState.PENDING:
                self.tails[tail.array_job_id] = tail
        started = [jid for jid, r in self.jobs.items() if r.start_time is not None]
        from corral.controller.steps import attach_loaded

        attach_loaded(self.jobs, await loop.run_in_executor(None, self.store.load_steps,
                                                            started))
        # the counter restarts after the highest stored id (this controller is the only
        # writer now: SQLite's state-directory lock, or PostgreSQL's fencing epoch)
        self.ids.reset(await asyncio.wrap_future(self.store.submit(
            self.store.op_reset_ids(max(self.cfg.controller.first_job_id, tails_top + 1)))))
        from corral.controller.submitkeys import TTL_S

        since = time.time() - TTL_S
        self.keys.load(key_rows if key_rows is not None else
                       await loop.run_in_executor(None, self.store.load_keys, since))
        self.store.submit(self.store.op_prune_keys(since))
        from corral.controller import reservations
        from corral.controller.usage import META_KEY

        try:
            self.reservations.load_json(await loop.run_in_executor(
                None, self.store.get_meta, reservations.META_KEY))
        except (ValueError, TypeError, KeyError):
            log.exception("ignoring an unreadable record of advance reservations")
        try:
            self.history_log.load(await loop.run_in_executor(None,
                                                             self.store.load_history_last))
        except (ValueError, TypeError, KeyError):
            log.exception("ignoring an unreadable node history")
        saved = await loop.run_in_executor(None, self.store.get_meta, META_KEY)
        if saved:
            try:
                self.ledger.load_json(saved)
            except (ValueError, TypeError, KeyError):
                log.warning("ignoring an unreadable fair-share usage record")
        await loop.run_in_executor(None, self.events.load)
        try:
            self.outbox.load(await loop.run_in_executor(None, self.store.load_mail))
        except Exception:  # noqa: BLE001 - mail must not keep the controller down
            log.exception("ignoring the stored mail outbox")
        self.store.hook_loop = loop
        await self._load_dependency_targets(list(self.pending.values()))
        self.metrics.set_jobs(len(self.pending), len(self.running))
        self.load_s = time.monotonic() - t0
        log.info("recovered %d pending and %d running jobs (%s, %.3f s); next job id %d",
                 len(self.pending), len(self.running),
                 "warm" if key_rows is not None else "cold", self.load_s, self.ids.peek())
        await self.store.bind_loop()  # SQLite: commits on this loop from now on
        self._tasks.append(asyncio.create_task(self.sched.run(), name="scheduler"))
        self._tasks.append(asyncio.create_task(self._ticker(), name="ticker"))
        self.outbox.kick()  # mails owed from before the restart
        self.sched.trigger()

    def _load_active_records(self) -> list[JobRecord]:
        recs = []
        subs = SubmissionPool(self.envs)
        for row in self.store.load_active():
            try:
                recs.append(record_from_row(row, subs))
            except Exception:  # one unreadable row must not keep the controller down
                log.exception("job %s: its stored record cannot be read; left out", row.id)
        return recs

    def term_end(self) -> asyncio.Future[None]:
        """A future done once this term is over (``stop``, as ``term_over``): what a
        request racing the term's end waits on without a task of its own per request."""
        if self._term_end is None:
            self._term_end = asyncio.get_running_loop().create_future()
            if self.term_over.is_set():
                self._term_end.set_result(None)
        return self._term_end

    async def stop(self) -> None:
        self.term_over.set()
        if self._term_end is not None and not self._term_end.done():
            self._term_end.set_result(None)
        self.periodic_checks.stop()
        self.outbox.stop()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        await self.hub.close_all()
        self.heap.close()
        self._save_usage()
        self.store.flush()
        await asyncio.get_running_loop().run_in_executor(None, self.store.close)

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(min(self.cfg.controller.tick_s, 1.0))
            try:
                await self.tick(time.time())
            except Exception:
                log.exception("tick failed")

    async def tick(self, now: float) -> None:
        """Time-based work: node timeouts, pruning finished jobs, a periodic cycle."""
        await self.nodes.check_timeouts(now)
        self.health.tick(now)
        self.periodic_checks.tick(now)
        self.reservations.tick(now)
        self.mail_limits.tick(now)
        self.outbox.tick(now)
        await self.power.tick(now)
        self.history_log.tick(now)
        allocations.check_keepalives(self, now)
        self._prune_recent(now)
        self.keys.prune(now)
        self._save_usage()
        self.heap.tick(now)
        if now - self._events_pruned >= 3600:  # hourly: events past their retention
            self._events_pruned = now
            self.store.submit(self.events.prune_op(
                now - self.cfg.controller.event_retention_s))
        if now - self.sched.last_cycle_end >= self.cfg.controller.tick_s:
            self.sched.trigger()

    def _save_usage(self) -> None:
        if self.ledger.dirty:
            from corral.controller.usage import META_KEY

            self.ledger.dirty = False
            self.store.submit(self.store.op_set_meta(META_KEY, self.ledger.to_json()))

    # ---- bookkeeping ----------------------------------------------------------------

    def _index(self, rec: JobRecord) -> None:
        rec.default_partition = self.default_partition
        self.jobs[rec.id] = rec
        self.index.add(rec)
        if rec.array_job_id is not None:
            self.arrays.setdefault(rec.array_job_id, {})[rec.id] = None
        self._place(rec)

    def _place(self, rec: JobRecord) -> None:
        """Keep the pending/running maps in step with the record's state."""
        self.pending.pop(rec.id, None)
        self.pending_images.pop(rec.id, None)
        self.running.pop(rec.id, None)
        if rec.state is JobState.SUSPENDED:
            self.suspended.add(rec.id)
        else:
            self.suspended.discard(rec.id)
        if rec.state is JobState.PENDING:
            self.pending[rec.id] = rec
            if "container" in rec.sub.extra and image_of(rec):
                self.pending_images[rec.id] = rec
            if rec.sub.extra.get("reservation"):  # --reservation: for the scheduler
                self.reservations.note_job(rec.id, rec.sub.extra["reservation"])
        elif rec.state.is_active:
            self.running[rec.id] = rec

    def _prune_recent(self, now: float) -> None:
        age = self.cfg.controller.min_job_age_s
        while self.recent:
            rec = self.jobs.get(self.recent[0])
            if rec is not None and rec.state.is_finished and rec.end_time is not None \
                    and now - rec.end_time < age:
                break
            jid = self.recent.popleft()
            if rec is None or not rec.state.is_finished:
                continue
            del self.jobs[jid]
            self.index.remove(rec)
            if rec.array_job_id is not None:
                tasks = self.arrays.get(rec.array_job_id)
                if tasks is not None:
                    tasks.pop(jid, None)
                    if not tasks:
                        del self.arrays[rec.array_job_id]
        if len(self.finished) > 4 * max(len(self.pending), 1000):
            needed = self._dependency_targets(self.pending.values())
            for jid in list(self.finished):
                if jid not in needed and jid not in self.jobs:
                    del self.finished[jid]

    async def node_history(self, since: float, until: float) -> dict[str, Any]:
        """Node DOWN/DRAINED and reservation intervals inside a window (sreport;
        ``corral.controller.nodehistory.window``)."""
        from corral.controller.nodehistory import window

        if not since < until:
            raise ApiError("invalid", f"since ({since}) must be before until ({until})")
        self.history_log.tick(time.time())  # what changed since the last tick, first
        rows = await asyncio.get_running_loop().run_in_executor(
            None, self.store.load_history, since, until)
        return window(rows, since, min(until, time.time()))

    def persist(self, inserts: Iterable[JobRecord] = (), updates: Iterable[JobRecord] = (),
                with_submission: Iterable[JobRecord] = (),
                keys: list[dict[str, Any]] | None = None,
                tails: Iterable[Any] = (), announce: bool = True) -> asyncio.Future[Any]:
        """Queue the rows of these records (and array tails: saved, or deleted once
        empty) for one commit; ``announce``: new records get their submit event (not
        tasks split off a tail: the array's submit announced them)."""
        new_recs = list(inserts)
        updates = changed = list(updates)
        ins = [insert_row(r) for r in new_recs]
        evs = self.events.capture(new_recs if announce else (), changed, time.time())
        if not announce:
            for r in new_recs:
                r.event_state = r.state.value
        ups = []
        step_ups: list[dict[str, Any]] = []
        for r in updates:
            r.touch_api()  # every change is persisted: the cached API view is stale
            ups.append(update_row(r))
            if r.steps_unsaved:  # steps closed by the job's end or requeue
                step_ups.extend(st.update_row() for st in r.steps_unsaved)
                r.steps_unsaved = []
        subs = [{"_id": r.id, "submission": _submission_json(r)} for r in with_submission]
        ops = []
        if ins:
            ops.append(self.store.op_insert_jobs(ins))
        if ups:
            ops.append(self.store.op_update_jobs(ups))
        if subs:
            ops.append(self.store.op_update_jobs(subs))
        if step_ups:
            ops.append(self.store.op_update_steps(step_ups))
        if keys:
            ops.append(self.store.op_insert_keys(keys))
        if evs:
            ops.append(self.events.op(evs))
        for tail in tails:
            ops.append(self.store.op_save_tail(tail.row()) if tail.remaining
                       or tail.state is not JobState.PENDING
                       else self.store.op_delete_tail(tail.array_job_id))

        def run(conn: Any) -> None:
            for op in ops:
                op(conn)

        return self.store.submit_async(run)

    def _finished_info(self, rec: JobRecord) -> FinishedJob:
        return FinishedJob(id=rec.id, state=rec.state, exit_code=rec.exit_code or 0,
                           name=rec.sub.spec.name, user=rec.sub.spec.user,
                           start_time=rec.start_time, end_time=rec.end_time,
                           array_job_id=rec.array_job_id, array_task_id=rec.array_task_id)

    def finish(self, rec: JobRecord, state: JobState, now: float, *, exit_code: int | None = None,
               signal: int = 0, reason: str = "") -> None:
        """Move a job to a terminal state in memory (the caller persists)."""
        was_active = rec.state.is_active
        if rec.state is JobState.SUSPENDED:
            end_suspension(self, rec, now)
        rec.state = job_transition(rec.state, _EXIT_EVENTS[state.value])
        rec.end_time = now
        rec.exit_code = exit_code if exit_code is not None else rec.exit_code
        rec.signal = signal
        rec.end_reason = reason or rec.end_reason
        rec.reason = "None"
        rec.reason_detail = ""
        rec.rank = None
        rec.est_start = None
        rec.touch()
        if was_active:
            self._release_shares(rec)
            self.nodes.release(rec)
            self.ledger.charge(rec, now)
            if self.cfg.scripts.epilog_slurmctld:
                from corral.controller.jobscripts import epilog_slurmctld

                epilog_slurmctld(self, rec)
        if (self.cfg.scripts.mail_prog or self.cfg.mail.smtp_host) \
                and rec.sub.extra.get("mail_type"):
            from corral.controller.mail import job_event

            job_event(self, rec, "END")
        if rec.steps:
            close_open_steps(rec, rec.state, now)
        self._place(rec)
        self.recent.append(rec.id)
        self.finished[rec.id] = self._finished_info(rec)
        self.metrics.job_ended(rec.state.value)
        self.metrics.set_jobs(len(self.pending), len(self.running))

    def _release_shares(self, rec: JobRecord) -> None:
        """A run of a job of several nodes ended: all its nodes let go of it now (the
        first one too: the run may have ended without its batch script, e.g. another
        node failed; a kill for a run already over there is ignored by its agent)."""
        if rec.allocation is not None and len(rec.allocation.nodes) > 1:
            self.hub.release_shares(rec.id, rec.restarts, list(rec.allocation.node_names))

    def requeue_record(self, rec: JobRecord, now: float, *, hold: bool = False,
                       admin_hold: bool = False) -> None:
        """Back to PENDING for a new run; ``hold``: held by the user (requeuehold),
        ``admin_hold`` (or the record's ``requeue_admin_hold``: a node's prolog failed):
        held by the administrator."""
        admin_hold = admin_hold or rec.requeue_admin_hold
        ran_s = (now - rec.start_time) if rec.start_time else 0.0  # for the mail
        if rec.state is JobState.SUSPENDED:
            end_suspension(self, rec, now)
        if rec.state.is_active:
            self._release_shares(rec)
            self.nodes.release(rec)
            rec.state = job_transition(rec.state, JobEvent.REQUEUE)
        else:
            rec.state = job_transition(rec.state, JobEvent.REQUEUE)
        if rec.steps:  # the old run's steps stay in the store; the new run counts from 0
            close_open_steps(rec, JobState.CANCELLED, now)
            rec.steps = []
        rec.restarts += 1
        rec.start_time = None
        rec.suspended_s = 0.0  # a new run: its own suspensions and warnings
        rec.warning = ""
        rec.end_time = None
        rec.allocation = None
        rec.partition = None
        rec.exit_code = None
        rec.signal = 0
        rec.dispatched = False
        rec.cancel_requested = False
        rec.requeue_requested = False
        rec.requeue_hold = False
        rec.requeue_admin_hold = False
        rec.fail_state = ""
        rec.preempted_by = None
        rec.eligible_time = None
        if admin_hold:
            rec.hold = HoldKind.ADMIN
        elif hold:
            rec.hold = HoldKind.USER
        rec.reason = "JobHeldAdmin" if admin_hold else "JobHeldUser" if hold else "None"
        if (self.cfg.scripts.mail_prog or self.cfg.mail.smtp_host) \
                and rec.sub.extra.get("mail_type"):
            from corral.controller.mail import job_event

            job_event(self, rec, "REQUEUE", ran_s)
        rec.touch()
        self.finished.pop(rec.id, None)
        self._place(rec)
        self.metrics.set_jobs(len(self.pending), len(self.running))

    # ---- dependencies -----------------------------------------------------------------

    @staticmethod
    def _dependency_targets(recs: Iterable[JobRecord | _Probe]) -> set[int]:
        out: set[int] = set()
        for r in recs:
            dep = r.sub.spec.dependency
            if dep is not None:
                for item in dep.items:
                    out.update(item.job_ids)
        return out

    async def _load_dependency_targets(self, recs: list[JobRecord]) -> None:
        """Finished jobs (and array tasks) that pending jobs depend on, from the store."""
        targets = {t for t in self._dependency_targets(recs)
                   if t not in self.jobs and t not in self.finished}
        if not targets:
            return
        loop = asyncio.get_running_loop()
        rows = await loop.run_in_executor(None, lambda: self.store.history(
            ids=list(targets), array_ids=list(targets)))
        for row in rows:
            rec = record_from_row(row)
            if rec.state.is_finished and rec.id not in self.jobs:
                self.finished[rec.id] = self._finished_info(rec)

    def _job_exists(self, jid: int) -> bool:
        return jid in self.jobs or jid in self.finished or jid in self.arrays

    # ---- submission ---------------------------------------------------------------------

    async def submit(self, body: Any, who: Identity, submit_host: str = "",
                     key: str | None = None) -> dict[str, Any]:
        """Accept a submission; with an idempotency ``key`` (``corral.controller.
        submitkeys``), a repeat of an accepted one answers the same jobs."""
        if key is None:
            from corral.controller.submitkeys import REQUEST_KEY

            key = REQUEST_KEY.get()
            if key is None:
                return await self._submit(body, who, submit_host, None)
            REQUEST_KEY.set(None)  # one submit per request carries it
        scoped = f"{who.uid}:{key}"
        known = self.keys.answers.get(scoped)
        if known is not None:
            self.keys.replays += 1
            return dict(known)
        inflight = self.keys.inflight.get(scoped)
        if inflight is not None:
            self.keys.replays += 1
            return dict(await asyncio.shield(inflight))
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.keys.inflight[scoped] = fut
        try:
            out = await self._submit(body, who, submit_host, scoped)
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: no "never retrieved" warning without waiters
            raise
        finally:
            del self.keys.inflight[scoped]
        fut.set_result(out)
        return out

    async def _submit(self, body: Any, who: Identity, submit_host: str,
                      key: str | None) -> dict[str, Any]:
        t0 = time.perf_counter()
        sub = intake.decode_submission(body)
        sub = intake.apply_identity(sub, who, self.cfg, self.single_uid)
        intake.check_names(sub, self.cfg)
        sub = normalize_runtime(sub, self.cfg)
        self.reservations.check_submit(sub)
        if sub.extra.get("mail_user"):
            from corral.controller.mail import check_submit as check_mail

            check_mail(sub)
        indices, max_running = intake.array_indices(sub, self.cfg)
        if sub.spec.dependency is not None:
            unknown = [t for t in self._dependency_targets([_Probe(sub)])
                       if not self._job_exists(t)]
            if unknown:
                loop = asyncio.get_running_loop()
                rows = await loop.run_in_executor(None, lambda: self.store.history(
                    ids=unknown, array_ids=unknown))
                for row in rows:
                    rec = record_from_row(row)
                    if rec.state.is_finished:
                        self.finished[rec.id] = self._finished_info(rec)
                    if rec.array_job_id is not None:
                        self.finished.setdefault(rec.id, self._finished_info(rec))
                known = {r.id for r in rows} | {r.array_job_id for r in rows
                                                if r.array_job_id is not None}
                spec = intake.filter_dependency(
                    sub.spec, lambda j: self._job_exists(j) or j in known)
            else:
                spec = sub.spec
            sub = dataclasses.replace(sub, spec=spec)
        self.sched.check_feasible(sub.spec)
        first = await self.ids.take(max(len(indices), 1))
        now = time.time()
        from corral.controller.arraytail import ArrayTail

        window = self.cfg.controller.array_window
        big = len(indices) > window  # the rest stays one compact record (a tail)
        sub = self.envs.share_in(sub)
        recs = intake.build_records(sub, first, now, submit_host or self.host, indices,
                                    max_running, window if big else None)
        tails = [ArrayTail(first, recs[0].sub, now, submit_host or self.host, indices,
                           window, max_running, recs[0].hold)] if big else []
        if sub.hold:
            for rec in recs:
                rec.reason = "JobHeldUser"
        if "container" in sub.extra:  # nodes holding its image are tried first
            from corral.controller.images import refresh_preferences

            refresh_preferences(recs, self.nodes.nodes)
        answer = {"job_ids": [r.id for r in recs], "array_job_id": first if indices else None,
                  "display_id": str(first)}
        if big:
            answer["job_ids"] = list(range(first, first + len(indices)))
        if key is None:
            await self.persist(inserts=recs, tails=tails)
        else:
            from corral.controller.submitkeys import SubmitKeys

            await self.persist(inserts=recs, keys=[SubmitKeys.row(key, answer, now)],
                               tails=tails)
            self.keys.recorded(key, answer, now)
        for rec in recs:
            self._index(rec)
        for tail in tails:
            self.tails[tail.array_job_id] = tail
        self.metrics.submitted(len(recs), time.perf_counter() - t0)
        self.metrics.set_jobs(len(self.pending), len(self.running))
        if not sub.hold:  # a held job cannot start: no cycle needed
            self.sched.trigger()
        return dict(answer)

    # ---- lookups ------------------------------------------------------------------------

    def resolve_memory(self, ref: str) -> list[JobRecord] | None:
        """Records for an id reference in memory: ``12``, ``12_3``, ``12_[1-3]``.

        ``None`` when the reference is well formed but not in memory."""
        base, sep, task = ref.partition("_")
        jid = job_number(base, ref)
        tail = self.tails.get(jid)
        extra: list[JobRecord] = []
        if tail is not None and tail.remaining and tail.state is JobState.PENDING:
            from corral.controller.arraytail import view_of

            extra = [view_of(self, tail)]
        if not sep:
            if jid in self.arrays:
                return [self.jobs[t] for t in self.arrays[jid] if t in self.jobs] + extra
            rec = self.jobs.get(jid)
            return [rec] if rec is not None else (extra or None)
        wanted = _task_set(ref, task, self.cfg.scheduler.max_array_size)
        tasks = [self.jobs[t] for t in self.arrays.get(jid, ()) if t in self.jobs]
        if wanted is None:
            return (tasks + extra) or None
        found = [t for t in tasks if t.array_task_id in wanted]
        if tail is not None and extra:  # tasks still in the tail: each as its own view
            for idx in sorted(wanted):
                if tail.contains(idx):
                    pos = tail.indices.index(idx, tail.next_pos)
                    one = tail.record(pos)
                    one.default_partition = self.default_partition
                    found.append(one)
        return found or None

    async def resolve(self, ref: str, *, split: bool = False) -> list[JobRecord]:
        """Records for an id reference, from memory or the store (finished long ago).
        ``split``: tasks named one by one that are still in a large array's tail become
        job records first (an action is about to change them)."""
        base, sep, task = ref.partition("_")
        if split and sep and is_number(base) and int(base) in self.tails:
            from corral.controller.arraytail import split as split_tail

            wanted = _task_set(ref, task, self.cfg.scheduler.max_array_size)
            if wanted is not None:
                await split_tail(self, int(base), wanted)
        found = self.resolve_memory(ref)
        if found is not None:
            return found
        base, sep, task = ref.partition("_")
        jid = job_number(base, ref)
        loop = asyncio.get_running_loop()
        rows = await loop.run_in_executor(
            None, lambda: self.store.history(ids=[jid], array_ids=[jid]))
        recs = [record_from_row(r) for r in rows]
        for r in recs:
            r.default_partition = self.default_partition
        if sep:
            wanted = _task_set(ref, task, self.cfg.scheduler.max_array_size)
            recs = [r for r in recs if r.array_job_id == jid
                    and (wanted is None or r.array_task_id in wanted)]
        else:
            arr = [r for r in recs if r.array_job_id == jid]
            recs = arr or [r for r in recs if r.id == jid]
        return recs

    async def get_job(self, ref: str, who: Identity) -> dict[str, Any]:
        recs = await self.resolve(ref)
        if not recs:
            raise ApiError("not_found", f"Invalid job id specified: {ref}",
                           slurm="Invalid job id specified")
        rec = recs[0] if len(recs) == 1 else next(
            (r for r in recs if r.id == job_number(ref.partition("_")[0], ref)), recs[0])
        out = rec.to_api(time.time(), detail=True, private=self.may_see_private(rec, who))
        from corral.controller.steps import steps_api

        out["steps"] = (await steps_api(self, [rec]))[rec.id]
        return out

    def query(self, flt: dict[str, Any]) -> list[JobRecord]:
        states = set(flt.get("states") or ())
        include_finished = bool(flt.get("include_finished")) or bool(
            states & {s.value for s in JobState if s.is_finished})
        indexed = None if flt.get("ids") else self.index.ids(flt.get("user"),
                                                             flt.get("name"))
        if flt.get("ids"):
            recs: list[JobRecord] = []
            seen: set[int] = set()
            for ref in flt["ids"]:
                for r in self.resolve_memory(str(ref)) or ():
                    if r.id not in seen:
                        seen.add(r.id)
                        recs.append(r)
            recs.sort(key=lambda r: r.id)
        elif indexed is not None:  # one user's or one name's jobs: the index, no scan
            jobs = self.jobs
            recs = [jobs[j] for j in sorted(indexed)]
            if not include_finished:
                recs = [r for r in recs if r.state not in _FINISHED]
        elif include_finished:
            recs = sorted(self.jobs.values(), key=lambda r: r.id)
        else:
            recs = list(self.pending.values()) + list(self.running.values())
            recs.sort(key=lambda r: r.id)
        if self.tails and not flt.get("ids"):  # large arrays' remainders, one view each
            from corral.controller.arraytail import views

            more = views(self, flt.get("user"), flt.get("name"))
            if more:
                recs = sorted(recs + more, key=lambda r: r.id)
        user = flt.get("user")
        part = flt.get("partition")
        account = flt.get("account")
        name = flt.get("name")
        if indexed is not None and not self.tails:  # the index matched user and name
            user = name = None
        if user is None and not states and part is None and account is None and name is None:
            return recs
        out = []
        for r in recs:
            if user is not None and r.user != user:
                continue
            if states and r.state.value not in states and r.state.short not in states:
                continue
            if part is not None and part not in ((r.partition,) if r.partition
                                                 else r.sub.spec.partitions):
                continue
            if account is not None and r.sub.spec.account != account:
                continue
            if name is not None and r.sub.spec.name != name:
                continue
            out.append(r)
        return out

    async def history(self, flt: dict[str, Any], who: Identity) -> list[dict[str, Any]]:
        user = flt.get("user")
        if user is None and not flt.get("all_users"):
            user = who.user
        ids: list[int] | None = None
        array_ids: list[int] | None = None
        if flt.get("ids"):
            ids, array_ids = [], []
            for ref in flt["ids"]:
                base, sep, task = str(ref).partition("_")
                jid = job_number(base, ref)
                if sep:  # well formed, or a 400 (the store is asked for the whole array)
                    _task_set(str(ref), task, self.cfg.scheduler.max_array_size)
                ids.append(jid)
                array_ids.append(jid)
        loop = asyncio.get_running_loop()
        rows = await loop.run_in_executor(None, lambda: self.store.history(
            user=user, since=flt.get("since"), until=flt.get("until"),
            states=flt.get("states"), ids=ids, array_ids=array_ids,
            account=flt.get("account"), partition=flt.get("partition"),
            names=flt.get("names"), limit=flt.get("limit"), after=flt.get("after")))
        now = time.time()
        recs = []
        for row in rows:
            mem = self.jobs.get(int(row.id))
            if mem is None:
                mem = record_from_row(row)
                mem.default_partition = self.default_partition
            recs.append(mem)
        if flt.get("limit") is None or len(rows) < int(flt["limit"]):  # the last page
            recs.extend(await self._tail_history(flt, user, ids))
        from corral.controller.steps import steps_api

        steps = await steps_api(self, recs)
        out = []
        for rec in recs:
            api = dict(rec.to_api(now))  # a copy: the summary view may be cached
            api["steps"] = steps[rec.id]
            out.append(api)
        return out

    async def _tail_history(self, flt: dict[str, Any], user: str | None,
                            ids: list[int] | None) -> list[JobRecord]:
        """Accounting views of large arrays' remainders (pending, or cancelled as one)."""
        from corral.controller.arraytail import tail_from_row

        loop = asyncio.get_running_loop()
        rows = await loop.run_in_executor(None, lambda: self.store.load_tails(
            user=user, ids=ids))
        states = set(flt.get("states") or ())
        names = set(flt.get("names") or ())
        out = []
        for row in rows:
            tail = self.tails.get(int(row.array_job_id)) or tail_from_row(row)
            if tail.state is JobState.PENDING and not tail.remaining:
                continue
            if states and tail.state.value not in states:
                continue
            if names and tail.sub.spec.name not in names:
                continue
            since, until = flt.get("since"), flt.get("until")
            if until is not None and tail.submit_time > until:
                continue
            if since is not None and tail.end_time is not None and tail.end_time < since:
                continue
            out.append(tail.view(self.default_partition))
        return out

    # ---- job actions --------------------------------------------------------------------

    @staticmethod
    def may_see_private(rec: JobRecord, who: Identity) -> bool:
        """The job's owner and operators (root) may act on it and read its batch script,
        environment and argv; anyone else sees the public summary only."""
        return who.is_admin or who.uid == rec.uid or (who.via == "token"
                                                      and who.user == rec.user)

    def _check_owner(self, rec: JobRecord, who: Identity) -> None:
        if not self.may_see_private(rec, who):
            raise ApiError("forbidden", f"Access/permission denied for job {rec.display_id}",
                           slurm="Access/permission denied")

    async def act(self, action: str, refs: list[str], who: Identity,
                  opts: dict[str, Any]) -> list[dict[str, Any]]:
        """cancel / hold / release / requeue on every referenced job; per-id results
        (``corral.controller.actions``)."""
        from corral.controller.actions import act

        return await act(self, action, refs, who, opts)

    async def update_job(self, ref: str, fields: dict[str, Any], who: Identity) -> dict[str, Any]:
        from corral.controller.actions import update_job

        return await update_job(self, ref, fields, who)

    # ---- agent events -----------------------------------------------------------------

    async def on_exits(self, node: str, exits: list[JobExit]) -> list[JobExit]:
        """Apply job exits reported by an agent; returns the ones to acknowledge."""
        now = time.time()
        changed: list[JobRecord] = []
        acks: list[JobExit] = []
        for ex in exits:
            acks.append(ex)
            rec = self.jobs.get(ex.job_id)
            if ex.script_failure:  # the node's Prolog or Epilog failed
                from corral.controller.jobscripts import on_script_failure

                if on_script_failure(self, node, rec, ex):
                    if rec is not None:
                        changed.append(rec)
                    continue
            if rec is None or not rec.state.is_active or rec.restarts != ex.restarts:
                continue  # stale: a run we already ended (or requeued): just forget it
            if rec.allocation is None or node not in rec.allocation.node_names:
                continue
            if rec.allocation.nodes[0].node != node:
                # a share of the job on another node ended while the job still runs:
                # that node lost its part of the job (killed, out of memory, its
                # supervisor died), so the whole job fails or is requeued, as in Slurm
                if rec.cancel_requested or rec.requeue_requested:
                    continue
                log.warning("job %d: its share on %s ended (%s %s): ending the job",
                            rec.id, node, ex.state, ex.reason)
                why = f"node {node} lost its part of the job ({ex.state.lower()}" + (
                    f": {ex.reason})" if ex.reason else ")")
                if rec.sub.spec.requeue:
                    rec.requeue_requested = True
                else:
                    rec.cancel_requested = True
                    rec.end_reason = why
                    rec.fail_state = "NODE_FAIL"
                rec.reason_detail = why
                self.hub.cancel(rec, 0)
                continue
            rec.cpu_time_s = ex.cpu_time_s
            rec.max_rss_mb = ex.max_rss_mb
            if ex.stdout_path:
                rec.stdout = ex.stdout_path
                rec.stderr = ex.stderr_path or ex.stdout_path
            if rec.requeue_requested:
                hold = rec.requeue_hold
                self.requeue_record(rec, now, hold=hold)
            else:
                try:
                    state = JobState(ex.state)
                except ValueError:
                    state = JobState.FAILED
                released = allocations.final_state(rec)
                if released is not None:
                    state, code = released
                    self.finish(rec, state, ex.end_time or now, exit_code=code,
                                reason=rec.end_reason)
                    if ex.start_time:
                        rec.start_time = min(rec.start_time or ex.start_time, ex.start_time)
                    changed.append(rec)
                    continue
                if rec.cancel_requested and rec.fail_state == "NODE_FAIL":
                    state = JobState.NODE_FAIL
                elif rec.cancel_requested and state is not JobState.COMPLETED:
                    # killed by preemption in CANCEL mode: Slurm's PREEMPTED state
                    state = (JobState.PREEMPTED if rec.preempted_by is not None
                             else JobState.CANCELLED)
                reason = (rec.end_reason if state in (JobState.CANCELLED, JobState.PREEMPTED,
                                                      JobState.NODE_FAIL)
                          and rec.end_reason else ex.reason)
                self.finish(rec, state, ex.end_time or now, exit_code=ex.exit_code,
                            signal=ex.signal, reason=reason)
                if ex.start_time:
                    rec.start_time = min(rec.start_time or ex.start_time, ex.start_time)
            changed.append(rec)
        if changed:
            await self.persist(updates=changed)
            self.sched.trigger()
        return acks

    async def on_launch_failed(self, node: str, job_id: int, restarts: int, message: str) -> None:
        rec = self.jobs.get(job_id)
        if rec is None or not rec.state.is_active or rec.restarts != restarts:
            return
        now = time.time()
        log.warning("launch of job %d on %s failed: %s", job_id, node, message)
        if rec.sub.spec.requeue and rec.restarts < 3:
            self.requeue_record(rec, now)
            rec.reason_detail = f"launch failed on {node}: {message}"
        else:
            self.finish(rec, JobState.FAILED, now, exit_code=1,
                        reason=f"launch failed on {node}: {message}")
        await self.persist(updates=[rec])
        self.sched.trigger()


class _Probe:
    """Adapter so ``_dependency_targets`` can look at a bare submission."""

    def __init__(self, sub: Any) -> None:
        self.sub = sub


def _task_set(ref: str, task: str, max_array_size: int) -> set[int] | None:
    """The task ids ``task`` names (None: all); indices are bounded by the cluster's
    ``max_array_size``, so ``12_[0-4000000000]`` is a 400, not gigabytes of set."""
    if task in ("*", ""):
        return None
    if is_number(task):
        return {job_number(task, ref)}
    if task.startswith("[") and task.endswith("]"):
        from corral.core.parse.arrayspec import parse_array
        from corral.core.parse.errors import ParseError

        try:
            return set(parse_array(task[1:-1], max_array_size=max_array_size).indices)
        except ParseError:
            pass
    raise ApiError("invalid", f"Invalid job id {ref}", slurm="Invalid job id specified")


def _submission_json(rec: JobRecord) -> str:
    import json

    return json.dumps(rec.sub.to_json(), separators=(",", ":"))


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
