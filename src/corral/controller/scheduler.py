"""The event-driven scheduling loop and the binder (apply decisions: persist, then dispatch).

Loop: any event (submit, job end, node change, release...) calls ``trigger()``. The loop
waits ``schedule_delay_ms`` so a burst of events shares one cycle, builds a frozen
``ClusterSnapshot`` from the in-memory records (cached core views, no database access),
runs ``corral.core.run_cycle`` (in a worker thread, unless the last cycle took under
``INLINE_CYCLE_S`` of CPU: then on the loop, cheaper than the thread hop), then applies the
result on the event loop. Events that arrive during a cycle trigger the next one. A slow
periodic tick (``tick_s``) covers time-based changes (begin times, priority age).

Bounded cycles: at most ``[controller] cycle_max_starts`` jobs start in one cycle (or the
``[scheduler] max_starts_per_cycle`` cap when set; ``SchedulerConfig.max_starts_per_cycle``).
The core's pass stops starting there, so what it decided is the first part of what an
unbounded pass decides (nothing before the cap depends on the jobs after it; no
reservation is delayed), and the jobs behind it wait with reason ``Priority``; a cycle
that reached the cap triggers the next one. A burst (a deep queue released on an idle
cluster) is so split over cycles whose work is bounded by the cap plus what is linear in
the queue at C level (priorities, the sort, the compact waiting tail), and every
cycle's decisions are applied, persisted and dispatched before the next snapshot.

Binder: each ``Start`` is re-checked against what changed during the cycle (job still
pending and not held or cancelled, nodes still schedulable), moved to RUNNING in memory,
persisted in one commit, and only then sent to the agents. A launch the agent cannot
perform comes back as ``launch_failed`` (requeue or fail, ``service.on_launch_failed``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from corral.agent.launch import LaunchRequest
from corral.agent.prepare import output_paths
from corral.controller.env import job_environment, pbs_nodefile_text
from corral.controller.errors import ApiError
from corral.controller.jobscripts import (
    end_unlaunched,
    launch_after_prolog,
    script_environment,
)
from corral.controller.records import JobRecord
from corral.controller.runtimes import job_runtime
from corral.controller.suspend import resume_ready, suspend
from corral.core.config import SchedulerConfig
from corral.core.decisions import (
    CycleResult,
    PendingInfo,
    PendingMap,
    PendingTail,
    Reserve,
    Start,
)
from corral.core.model.job import Allocation, HoldKind, JobSpec, JobState, NodeAllocation
from corral.core.model.partition import PreemptMode
from corral.core.model.transitions import JobEvent, job_transition
from corral.core.snapshot import ClusterSnapshot

if TYPE_CHECKING:
    from corral.controller.service import Controller

log = logging.getLogger("corral.scheduler")

INLINE_CYCLE_S = 0.002  # cycles that took less than this last time run on the event loop


class SchedulerLoop:
    def __init__(self, ctl: Controller, cycle_fn: Callable[..., Any] | None = None) -> None:
        self.ctl = ctl
        if cycle_fn is None:
            from corral.core.cycle import run_cycle

            cycle_fn = run_cycle
        self.cycle_fn = cycle_fn
        self.sched_cfg = self._scheduler_config()
        self._event = asyncio.Event()
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="cycle")
        self.generation = 0
        self.last_cycle_end = 0.0
        self.last_cycle_s = 0.0
        self.last_cycle_cpu_s = 0.0  # CPU time of the last cycle itself (inline or not)
        self.cycles = 0
        self._held_now: list[JobRecord] = []  # held by the snapshot, to persist
        self.reserved: tuple[int, ...] = ()
        # last cycle's reservations: conservative backfill keeps them as guarantees
        self.reservations: tuple[Reserve, ...] = ()
        self.preempt_grace: dict[int, int] = {}
        self._accounts = ctl.cfg.account_tree()
        self._qos = ctl.cfg.qos_models()
        self._licenses = tuple((lic.name, lic.count) for lic in ctl.cfg.licenses)
        self._validate: Callable[..., Any] | None = None
        self._feasible_key: tuple[Any, ...] | None = None
        self._feasible_snap: ClusterSnapshot | None = None
        self._feasible_memo: dict[JobSpec, Any] = {}
        try:
            from corral.core.feasibility import validate

            self._validate = validate
        except ImportError:
            self._validate = None

    def _scheduler_config(self) -> SchedulerConfig:
        """The core's configuration as the cycles use it: ``[scheduler]``, bounded by
        ``[controller] cycle_max_starts`` when the scheduler sets no start cap of its own.
        One object for as long as the configuration is the same (the core memoizes its
        plans by this object's identity)."""
        cfg = self.ctl.cfg.to_scheduler_config()
        bound = self.ctl.cfg.controller.cycle_max_starts
        if cfg.max_starts_per_cycle is None and bound:
            from dataclasses import replace

            cfg = replace(cfg, max_starts_per_cycle=bound)
        return cfg

    def trigger(self) -> None:
        self._event.set()

    async def run(self) -> None:
        delay = self.ctl.cfg.controller.schedule_delay_ms / 1000.0
        while True:
            await self._event.wait()
            # adaptive coalescing: wait at least as long as the last cycle took, so
            # scheduling never takes more than about half of the controller's time
            # however fast events arrive (a burst of submits shares one cycle)
            wait = max(delay, min(self.last_cycle_s, 1.0))
            if wait:
                await asyncio.sleep(wait)
            self._event.clear()
            try:
                await self.cycle()
            except Exception:
                log.exception("scheduling cycle failed")
                await asyncio.sleep(0.5)

    # ---- snapshot ---------------------------------------------------------------------

    def snapshot(self, *, shared: bool = False) -> ClusterSnapshot:
        """The cluster as the core sees it. ``shared``: for a cycle that runs now, on the
        loop, the finished-jobs map is passed as it is (nothing changes it during the
        cycle; the core keeps nothing of it); otherwise it is copied (a cycle in the worker
        thread runs while the loop goes on)."""
        ctl = self.ctl
        self.generation += 1
        pending, held = self._pending_core()
        nodes = []
        for n in ctl.nodes.nodes.values():
            core = n.to_core()
            # a powered-down node is planned on (resumed when a job gets it); one powering
            # up takes more work before its agent registers (its launches wait for it)
            if not n.connected and core.state.schedulable and \
                    n.power not in ("POWERED_DOWN", "POWERING_UP"):
                from dataclasses import replace

                from corral.core.model.node import NodeState

                core = replace(core, state=NodeState.DOWN, reason="agent not connected")
            nodes.append(core)
        return ClusterSnapshot(
            nodes=tuple(nodes),
            partitions=ctl.nodes.partitions,
            qos=self._qos,
            accounts=self._accounts,
            pending=pending,
            held=held,
            running=tuple(r.to_core() for r in ctl.running.values()),
            finished=ctl.finished if shared else dict(ctl.finished),
            usage=ctl.ledger.view(time.time(), ctl.running.values()),
            generation=self.generation,
            reserved=self.reserved,
            reservations=self.reservations,
            licenses=self._licenses,
            advance=ctl.reservations.core(),
            job_reservations=(ctl.reservations.job_reservations()
                              if ctl.reservations.requested else {}),
            boot_ready=ctl.power.boot_ready(time.time()),  # [power] boot_time_s
        )

    def _pending_core(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """The pending jobs' core views, those on hold apart (``ClusterSnapshot.held``:
        the pass does not visit them; a queue of 100,000 held jobs cost 0.4-0.75 s a
        cycle). One whose record cannot be converted is held (and kept apart) instead of
        failing the whole snapshot."""
        out = []
        held = []
        none = HoldKind.NONE
        for rec in self.ctl.pending.values():
            if rec.hold is not none:  # the pass skips it; dependency lookups need its id
                unevaluable = rec.hold is HoldKind.ADMIN and \
                    rec.reason_detail.startswith(UNEVALUABLE)
                try:
                    held.append(_held_core(rec) if unevaluable else rec.to_core())
                except Exception:  # already held: a placeholder will do
                    log.exception("held job %d cannot be evaluated", rec.id)
                    held.append(_held_core(rec))
                continue
            try:
                out.append(rec.to_core())
            except Exception as exc:
                log.exception("job %d cannot be evaluated; holding it", rec.id)
                hold_unevaluable(rec, f"{exc.__class__.__name__}: {exc}")
                self._held_now.append(rec)
        return tuple(out), tuple(held)

    def check_feasible(self, spec: JobSpec) -> None:
        """Reject at submit what can never run (e.g. more CPUs than any node has).

        The verdict depends only on the spec and the static cluster (node specs, their
        partitions, partitions, QOS, accounts, scheduler settings): it is memoized per
        spec value while those are the same objects (a burst of identical submits
        validates once)."""
        if self._validate is None:
            return
        table = self.ctl.nodes
        if table.verdict_deferred(spec.partitions):
            return
        key = (table.partitions, tuple((n.spec, n.partitions) for n in table.nodes.values()))
        if key != self._feasible_key:
            self._feasible_key = key
            self._feasible_memo.clear()
            self._feasible_snap = ClusterSnapshot(
                nodes=tuple(n.to_core() for n in table.nodes.values()),
                partitions=table.partitions, qos=self._qos, accounts=self._accounts,
                licenses=self._licenses)
        try:
            rej = self._feasible_memo[spec]
        except KeyError:
            rej = self._validate(spec, self._feasible_snap, self.sched_cfg)
            if len(self._feasible_memo) >= 4096:
                self._feasible_memo.clear()
            self._feasible_memo[spec] = rej
        except TypeError:  # a spec value that cannot be hashed: no memo
            rej = self._validate(spec, self._feasible_snap, self.sched_cfg)
        if rej is not None:
            raise ApiError("rejected", rej.message, slurm=_slurm_reject(rej.reason))

    def config_changed(self) -> None:
        """The controller's configuration changed at run time (``livecfg``): QOS and
        accounts for the next snapshots, a fresh feasibility memo."""
        self._accounts = self.ctl.cfg.account_tree()
        self._qos = self.ctl.cfg.qos_models()
        self._licenses = tuple((lic.name, lic.count) for lic in self.ctl.cfg.licenses)
        self.sched_cfg = self._scheduler_config()
        self._feasible_key = None
        self._feasible_memo.clear()

    # ---- one cycle --------------------------------------------------------------------

    async def cycle(self) -> None:
        ctl = self.ctl
        if ctl.suspended:  # before the snapshot: freed cores go back to suspended jobs first
            resumed = resume_ready(ctl, time.time())
            if resumed:
                await ctl.persist(updates=resumed)
                for rec in resumed:
                    ctl.hub.resume(rec)
        if ctl.tails:  # large arrays: split the next tasks off their compact remainders
            from corral.controller.arraytail import refill

            await refill(ctl)
        if not ctl.pending and not any(r.cancel_requested for r in ctl.running.values()):
            if ctl.cfg.power.enabled:
                ctl.power.plan((), time.time())  # no waiting job needs a node resumed
            self.last_cycle_end = time.time()
            return
        now = time.time()
        t0 = time.perf_counter()
        inline = self.last_cycle_cpu_s < INLINE_CYCLE_S
        snap = self.snapshot(shared=inline)
        if self._held_now:
            held, self._held_now = self._held_now, []
            await ctl.persist(updates=held)
        result: CycleResult
        try:
            if inline:
                # a short cycle runs on the event loop: a hop to the worker thread (and
                # back, with GIL handoffs) costs more than the cycle itself
                result, self.last_cycle_cpu_s = self._timed_cycle(snap, now)
            else:  # a long one in the worker thread, so API calls interleave with it
                loop = asyncio.get_running_loop()
                result, self.last_cycle_cpu_s = await loop.run_in_executor(
                    self._pool, self._timed_cycle, snap, now)
        except Exception as exc:
            # one job the core cannot evaluate must not stall everyone's: find it, hold
            # it with the error as its reason, and schedule the others next cycle
            if not await self._hold_unevaluable(snap, now, exc):
                raise
            self.trigger()
            return
        elapsed = time.perf_counter() - t0
        self.last_cycle_s = elapsed
        self.reserved = result.reserved
        self.reservations = result.reservations
        self.cycles += 1
        started = await self.apply(result, time.time())
        ctl.metrics.cycle(elapsed, started)
        self.last_cycle_end = time.time()
        cap = self.sched_cfg.max_starts_per_cycle
        if cap is not None and len(result.starts) >= cap:
            self.trigger()  # the start cap stopped the pass: the rest in the next cycle

    def _culprits(self, snap: ClusterSnapshot, now: float) -> list[int] | None:
        """The pending jobs whose evaluation makes the cycle raise, found by bisection
        (a few cycles over halves of the queue); None when the cycle fails without any
        pending job, so no job is to blame."""
        from dataclasses import replace

        def fails(jobs: tuple[Any, ...]) -> bool:
            try:
                self.cycle_fn(replace(snap, pending=jobs), self.sched_cfg, now)
            except Exception:
                return True
            return False

        if fails(()):
            return None
        bad: list[int] = []
        todo = [snap.pending]
        while todo:
            jobs = todo.pop()
            if not jobs or not fails(jobs):
                continue
            if len(jobs) == 1:
                bad.append(jobs[0].id)
                continue
            half = len(jobs) // 2
            todo += [jobs[:half], jobs[half:]]
        return bad

    async def _hold_unevaluable(self, snap: ClusterSnapshot, now: float,
                                exc: Exception) -> bool:
        """Hold (JobHeldAdmin) every pending job that makes the cycle raise; False when
        none does (the failure is not one job's)."""
        bad = self._culprits(snap, now)
        if not bad:
            return False
        held = []
        for jid in bad:
            rec = self.ctl.pending.get(jid)
            if rec is not None:
                held.append(rec)
        log.error("scheduling cycle failed (%r); holding job(s) %s that cannot be "
                  "evaluated, the others are scheduled", exc,
                  ",".join(str(j) for j in bad), exc_info=exc)
        for rec in held:
            hold_unevaluable(rec, f"{exc.__class__.__name__}: {exc}")
        if held:
            await self.ctl.persist(updates=held)
        return True

    def _timed_cycle(self, snap: ClusterSnapshot, now: float) -> tuple[CycleResult, float]:
        """The cycle and the CPU time its own thread spent on it. Where the next cycle runs
        is decided on that, not on wall time: in the worker thread, wall time also counts
        the waits for the GIL while the loop serves requests, so one slow cycle would keep
        every later one off the loop."""
        t0 = time.thread_time()
        result: CycleResult = self.cycle_fn(snap, self.sched_cfg, now)
        return result, time.thread_time() - t0

    def apply_reasons(self, pending: Mapping[int, PendingInfo], now: float) -> None:
        """Each pending job's reason, priority, rank and estimated start, written to its
        record where they changed. A ``PendingMap``'s compact tail (one reason for the
        jobs behind the backfill test limit) is applied in bulk, without a
        ``PendingInfo`` per job."""
        if isinstance(pending, PendingMap):
            self._apply_infos(pending.explicit.values(), now)
            self._apply_tail(pending.tail, now)
        else:
            self._apply_infos(pending.values(), now)

    def _apply_infos(self, infos: Iterable[PendingInfo], now: float) -> None:
        get = self.ctl.pending.get
        for info in infos:
            rec = get(info.job_id)
            if rec is None or (rec.hold is HoldKind.ADMIN
                               and rec.reason_detail.startswith(UNEVALUABLE)):
                continue  # its reason is the error, not the core's view of a placeholder
            prio = float(round(info.priority))
            if (rec.reason != info.reason or rec.priority != prio or rec.rank != info.rank
                    or rec.est_start != info.est_start or rec.reason_detail != info.detail):
                if info.reason == _NEVER and rec.reason != _NEVER \
                        and rec.sub.extra.get("mail_type"):
                    from corral.controller.mail import job_event

                    job_event(self.ctl, rec, "INVALID_DEPEND")
                rec.reason = info.reason
                rec.reason_detail = info.detail
                rec.priority = prio
                rec.rank = info.rank
                rec.est_start = info.est_start
                rec.touch_api()
                if rec.eligible_time is None and info.reason not in _INELIGIBLE:
                    rec.eligible_time = now

    def _apply_tail(self, tail: PendingTail, now: float) -> None:
        """``_apply_infos`` for the jobs of ``tail`` (no estimated start), in one loop."""
        get = self.ctl.pending.get
        reason, detail = tail.reason, tail.detail
        eligible = reason not in _INELIGIBLE
        for jid, rank, prio in zip(tail.job_ids, tail.ranks,
                                   map(round, tail.priorities), strict=True):
            rec = get(jid)
            if rec is None or (rec.reason == reason and rec.priority == prio
                               and rec.rank == rank and rec.est_start is None
                               and rec.reason_detail == detail):
                continue
            if rec.hold is HoldKind.ADMIN and rec.reason_detail.startswith(UNEVALUABLE):
                continue
            rec.reason = reason
            rec.reason_detail = detail
            rec.priority = float(prio)
            rec.rank = rank
            rec.est_start = None
            rec.touch_api()
            if eligible and rec.eligible_time is None:
                rec.eligible_time = now

    async def apply(self, result: CycleResult, now: float) -> int:
        ctl = self.ctl
        self.apply_reasons(result.pending, now)
        for rej in result.rejects:
            rec = ctl.pending.get(rej.job_id)
            if rec is not None and rec.reason != rej.reason:
                rec.reason = rej.reason
                rec.reason_detail = rej.message
                rec.touch_api()
        starts: list[tuple[JobRecord, Start]] = []
        for st in result.starts:
            rec = ctl.pending.get(st.job_id)
            if rec is None or rec.hold is not HoldKind.NONE or rec.cancel_requested:
                continue
            if not all(ctl.nodes.is_schedulable(n) for n in st.allocation.node_names):
                continue
            starts.append((rec, st))
        for rec, st in starts:
            rec.state = job_transition(rec.state, JobEvent.START)
            rec.start_time = now
            if rec.eligible_time is None:
                rec.eligible_time = now
            rec.allocation = st.allocation
            rec.partition = st.allocation.partition
            if not rec.time_limit_set or (  # --time-min shortened an explicit limit
                    st.time_limit_s is not None and rec.time_limit_s is not None
                    and st.time_limit_s < rec.time_limit_s):
                rec.time_limit_s = st.time_limit_s
            rec.reason = "None"
            rec.reason_detail = ""
            rec.rank = None
            rec.est_start = None
            rec.dispatched = False
            rec.touch()
            ctl._place(rec)
            ctl.nodes.allocate(rec)
        if starts and (ctl.cfg.scripts.mail_prog or ctl.cfg.mail.smtp_host):
            from corral.controller.mail import job_event

            for rec, _st in starts:  # owed in the commit of the start (outbox.py)
                if rec.sub.extra.get("mail_type") and not rec.cancel_requested:
                    job_event(ctl, rec, "BEGIN")
        preempted, suspended = self._preempt(result, now)
        if starts or preempted or suspended:
            recs = [r for r, _ in starts] + preempted + suspended
            await ctl.persist(updates=recs)
            ctl.metrics.set_jobs(len(ctl.pending), len(ctl.running))
        unlaunchable: list[JobRecord] = []
        for rec, _st in starts:
            if not rec.state.is_active:
                continue  # ended while the start was committed (no agent was told)
            if rec.cancel_requested or rec.requeue_requested:
                # cancelled (or requeued) while the start was committed: the agent did
                # not know the job then, so nothing would ever report its end
                end_unlaunched(ctl, rec, now)
                unlaunchable.append(rec)
                continue
            try:
                req, shares = self.launch_request(rec), self.share_requests(rec)
            except Exception as exc:  # this job's record, not the others'
                log.exception("job %d: cannot build its launch; holding it", rec.id)
                ctl.requeue_record(rec, now)
                rec.restarts -= 1  # it never ran
                hold_unevaluable(rec, f"{exc.__class__.__name__}: {exc}")
                unlaunchable.append(rec)
                continue
            launch_after_prolog(ctl, rec, req, shares)
            if ctl.cfg.power.enabled:
                ctl.power.started(rec)
        if ctl.cfg.power.enabled:
            ctl.power.flush()  # resume the powered-down nodes these starts got
            ctl.power.plan(result.reservations, now)  # ... or the planned starts need
        if result.reservations:  # images of jobs planned to start soon, pulled early
            ctl.prefetch.plan(result.reservations, now)
        if unlaunchable:
            await ctl.persist(updates=unlaunchable)
        for rec in preempted:
            ctl.hub.cancel(rec, self.preempt_grace.pop(rec.id, None))
        for rec in suspended:
            ctl.hub.suspend(rec)
        if suspended:
            self.trigger()  # the preemptor starts on the freed cores in the next cycle
        return len(starts)

    def _preempt(self, result: CycleResult,
                 now: float) -> tuple[list[JobRecord], list[JobRecord]]:
        """Apply preemptions: (victims being killed, victims suspended)."""
        out: list[JobRecord] = []
        frozen: list[JobRecord] = []
        for p in result.preemptions:
            rec = self.ctl.running.get(p.victim_id)
            if rec is None or rec.cancel_requested or rec.requeue_requested:
                continue
            if p.mode is PreemptMode.SUSPEND:
                if rec.state is JobState.RUNNING:
                    suspend(self.ctl, rec, p.for_job_id, p.warning, now)
                    frozen.append(rec)
                continue
            if p.mode is PreemptMode.REQUEUE and rec.sub.spec.requeue:
                rec.requeue_requested = True
            else:
                rec.cancel_requested = True
                rec.end_reason = f"preempted by job {p.for_job_id}"
            rec.preempted_by = p.for_job_id
            rec.touch()  # the core must now see it as COMPLETING (not a victim again)
            self.preempt_grace[rec.id] = p.grace_s
            out.append(rec)
        return out, frozen

    # ---- launch -----------------------------------------------------------------------

    def launch_request(self, rec: JobRecord) -> LaunchRequest:
        assert rec.allocation is not None
        if rec.sub.extra.get("alloc_holder") == "1":  # salloc: shares only, first node too
            return self._share(rec, 0)
        ctl = self.ctl
        na = node_share(rec.allocation, rec.allocation.nodes[0].node)
        node = ctl.nodes.nodes.get(na.node)
        cpus: tuple[int, ...] = ()
        if node is not None:
            cpus = tuple(c for core in na.cores for c in node.spec.cpus_of_core(core))
        sub = rec.sub
        env = self._job_env(rec)
        # a qsub job: the agent writes its PBS_NODEFILE (corral.agent.pbsaux)
        extra = {"pbs_nodefile": pbs_nodefile_text(env)} if sub.dialect == "pbs" else {}
        if "container" in sub.extra:  # the job runs in an image (corral.agent.container)
            extra["container"] = sub.extra["container"]
        rec.runtime = self.runtime_of(rec)
        if rec.runtime == "vm":  # the agent runs it in a VM (corral.agent.vm)
            from corral.agent.vm.qemu import VmJob

            extra["vm"] = VmJob(ctl.cfg.vm, sub.extra.get("vm_image", ""), na.mem_mb).to_text()
        req = LaunchRequest(
            job_id=rec.id, name=sub.spec.name, user=sub.spec.user, uid=sub.spec.uid,
            gid=sub.spec.gid, workdir=sub.workdir, script=sub.script, argv=sub.argv,
            env=env, extra=extra,
            stdout=sub.stdout, stderr=sub.stderr, stdin=sub.stdin, open_mode=sub.open_mode,
            cores=na.cores, cpus=cpus, mem_mb=na.mem_mb, gpus=na.gpus,
            time_limit_s=rec.time_limit_s, kill_grace_s=ctl.cfg.controller.kill_grace_s,
            signal=sub.signal, tasks=na.tasks, array_job_id=rec.array_job_id,
            array_task_id=rec.array_task_id, nodes=rec.allocation.node_names, node_index=0,
            restarts=rec.restarts, **ctl.cfg.cgroup.launch_fields(),
            **self._script_fields(rec),
        )
        try:
            out, err = output_paths(req, na.node)
            rec.stdout, rec.stderr = out, err
        except Exception:  # display only; the agent expands for real
            pass
        return req


    def runtime_of(self, rec: JobRecord) -> str:
        """The job's runtime class: its own, or its partition's (``corral.core.runtime``)."""
        return job_runtime(rec, self.ctl.nodes.partitions)

    def _job_env(self, rec: JobRecord) -> dict[str, str]:
        env = job_environment(rec, self.ctl.cfg.cluster_name, self.ctl.host)
        if rec.sub.dialect == "volcano":  # each aligned replica's CPUs and GPUs (volcano_run)
            from corral.controller.kube_objects import replica_cpus_text, replica_gpus_text

            nodes = self.ctl.nodes.nodes
            text = replica_cpus_text(rec, lambda n: nodes[n].spec if n in nodes else None)
            if text:
                env["CORRAL_VC_CPUS"] = text
            text = replica_gpus_text(rec)
            if text:
                env["CORRAL_VC_GPUS"] = text
        minter = self.ctl.token_minter
        if minter is not None and "CORRAL_TOKEN" not in env:
            spec = rec.sub.spec
            # the job's own credential for its srun steps: as long as the job may run
            ttl = (rec.time_limit_s or 7 * 86400) + 86400
            env["CORRAL_TOKEN"] = minter(spec.user, spec.uid, spec.gid, ttl)
        return env

    def share_requests(self, rec: JobRecord) -> list[tuple[str, LaunchRequest]]:
        """Each node but the first of a job's allocation: its share of the job."""
        assert rec.allocation is not None
        out = []
        for na in rec.allocation.nodes[1:]:
            req = self.share_request(rec, na.node)
            if req is not None:
                out.append((na.node, req))
        return out

    def share_request(self, rec: JobRecord, node_name: str) -> LaunchRequest | None:
        """The run that holds job ``rec``'s cores, memory and GPUs on ``node_name`` (not
        its first node) for the job's steps: no script; it ends when the controller
        cancels it at the end of the job's run (``AgentHub.release_shares``)."""
        if rec.allocation is None:
            return None
        names = rec.allocation.node_names
        if node_name not in names or names.index(node_name) == 0:
            return None
        return self._share(rec, names.index(node_name))

    def _share(self, rec: JobRecord, index: int) -> LaunchRequest:
        assert rec.allocation is not None
        names = rec.allocation.node_names
        na = node_share(rec.allocation, names[index])
        node = self.ctl.nodes.nodes.get(na.node)
        cpus: tuple[int, ...] = ()
        if node is not None:
            cpus = tuple(c for core in na.cores for c in node.spec.cpus_of_core(core))
        sub = rec.sub
        env = self._job_env(rec)
        return LaunchRequest(
            job_id=rec.id, name=sub.spec.name, user=sub.spec.user, uid=sub.spec.uid,
            gid=sub.spec.gid, workdir=sub.workdir, env=env, extra={"share": "1"},
            cores=na.cores, cpus=cpus, mem_mb=na.mem_mb, gpus=na.gpus,
            kill_grace_s=self.ctl.cfg.controller.kill_grace_s, tasks=na.tasks,
            array_job_id=rec.array_job_id, array_task_id=rec.array_task_id,
            nodes=names, node_index=index, restarts=rec.restarts,
            **self.ctl.cfg.cgroup.launch_fields(), **self._script_fields(rec))

    def _script_fields(self, rec: JobRecord) -> dict[str, Any]:
        """The prolog/epilog fields of a launch ([scripts]); none when none is set."""
        scripts = self.ctl.cfg.scripts
        if not (scripts.prolog or scripts.epilog or scripts.task_prolog
                or scripts.task_epilog):
            return {}
        fields = scripts.launch_fields()
        fields["script_env"] = script_environment(rec, self.ctl.cfg.cluster_name)
        return fields


UNEVALUABLE = "the scheduler cannot evaluate this job: "


def hold_unevaluable(rec: JobRecord, error: str) -> None:
    """An admin hold on a job the scheduler cannot evaluate, the error its reason."""
    rec.hold = HoldKind.ADMIN
    rec.reason = "JobHeldAdmin"
    rec.reason_detail = (UNEVALUABLE + error)[:500]
    rec.touch()


def _held_core(rec: JobRecord) -> Any:
    """The core view of a held job that cannot be evaluated: a placeholder, the spec
    left out (the hold keeps it from being scheduled)."""
    from corral.core.model.job import Job

    return Job(id=rec.id, spec=JobSpec(name="held", user=str(rec.user)),
               submit_time=float(rec.submit_time) if isinstance(rec.submit_time, (int, float))
               else 0.0, hold=HoldKind.ADMIN)


_NEVER = "DependencyNeverSatisfied"  # --mail-type=INVALID_DEPEND mails when a job gets it
_INELIGIBLE = frozenset({"BeginTime", "Dependency", "DependencyNeverSatisfied",
                         "JobHeldUser", "JobHeldAdmin"})


def _slurm_reject(reason: str) -> str:
    return {
        "PartitionTimeLimit": "Requested time limit is invalid (missing or exceeds some limit)",
        "PartitionNodeLimit": "Node count specification invalid",
        "BadConstraints": "Requested node configuration is not available",
    }.get(reason, "Requested node configuration is not available")


def node_share(alloc: Allocation, node: str) -> NodeAllocation:
    """A job's whole share of ``node``: its allocation entries there merged (a job of task
    groups has one entry per group on a node; the run there holds them all)."""
    entries = [na for na in alloc.nodes if na.node == node]
    if len(entries) == 1:
        return entries[0]
    gres: dict[str, int] = {}
    for na in entries:
        for name, count in na.gres:
            gres[name] = gres.get(name, 0) + count
    return NodeAllocation(
        node=node, cores=tuple(c for na in entries for c in na.cores),
        cpus=sum(na.cpus for na in entries), mem_mb=sum(na.mem_mb for na in entries),
        gpus=tuple(g for na in entries for g in na.gpus),
        gpu_types=tuple(t for na in entries for t in na.gpu_types),
        gres=tuple(sorted(gres.items())),
        tasks=sum(na.tasks for na in entries))
