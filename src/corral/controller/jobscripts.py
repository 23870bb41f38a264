"""Prolog and epilog on the controller's side: PrologSlurmctld, EpilogSlurmctld, and what a
node's failed Prolog or Epilog does to the job and the node (Slurm 22.05 semantics).

- ``script_environment``: Slurm's prolog/epilog environment of a job, from the
  controller's own record (the agents add ``SLURMD_NODENAME``, ``SLURM_SCRIPT_CONTEXT``
  and the node's GPUs): never from the submit environment, since these programs run as
  root.
- ``launch_after_prolog``: with ``[scripts] prolog_slurmctld``, a started job's launch
  waits for that program on the controller's host (the job is RUNNING meanwhile, shown
  CONFIGURING as in Slurm: ``JobRecord.prolog_running``); exit 0 launches it, anything
  else requeues a batch job (held unless ``flags`` has ``nohold``) and cancels an
  interactive one (salloc/srun).
- ``epilog_slurmctld``: after a job's end, fire and forget; a failure is only logged.
- ``on_script_failure``: an agent reported that its Prolog failed (the node is drained
  with reason ``Prolog error``, the job requeued and held: Slurm's
  ``nohold_on_prolog_fail`` unset) or its Epilog failed (``Epilog error``; the job's end
  stands).

Programs run with ``asyncio`` subprocesses (the event loop never waits on them), stdin
``/dev/null``, output to the controller's log, killed with their session after
``[scripts] timeout_s`` (PrologEpilogTimeout; 0: no limit).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from typing import TYPE_CHECKING, Any

from corral.agent.launch import JobExit, LaunchRequest
from corral.controller.records import JobRecord
from corral.core.model.job import JobState

if TYPE_CHECKING:
    from corral.controller.service import Controller

log = logging.getLogger("corral.scripts")

PROLOG_ERROR = "Prolog error"
EPILOG_ERROR = "Epilog error"


def script_environment(rec: JobRecord, cluster_name: str) -> dict[str, str]:
    """Slurm's Prolog/Epilog environment of job ``rec`` (trusted fields only)."""
    from corral.core.parse.hostlist import compress

    spec = rec.sub.spec
    jid = str(rec.id)
    env = {
        "SLURM_JOB_ID": jid, "SLURM_JOBID": jid, "SLURM_JOB_NAME": spec.name,
        "SLURM_JOB_USER": spec.user, "SLURM_JOB_UID": str(spec.uid),
        "SLURM_JOB_GID": str(spec.gid), "SLURM_CLUSTER_NAME": cluster_name,
        "SLURM_JOB_WORK_DIR": rec.sub.workdir,
    }
    if rec.allocation is not None:
        nodelist = compress(list(rec.allocation.node_names), sort=False)
        env["SLURM_JOB_NODELIST"] = nodelist
        env["SLURM_NODELIST"] = nodelist
        env["SLURM_JOB_PARTITION"] = rec.allocation.partition
    if spec.account:
        env["SLURM_JOB_ACCOUNT"] = spec.account
    if spec.qos:
        env["SLURM_JOB_QOS"] = spec.qos
    if spec.constraint:
        env["SLURM_JOB_CONSTRAINTS"] = spec.constraint
    if rec.array_job_id is not None and rec.array_task_id is not None:
        env["SLURM_ARRAY_JOB_ID"] = str(rec.array_job_id)
        env["SLURM_ARRAY_TASK_ID"] = str(rec.array_task_id)
    env["SLURM_RESTART_COUNT"] = str(rec.restarts)
    return env


async def run_program(path: str, env: dict[str, str], timeout_s: float,
                      args: tuple[str, ...] = (), *,
                      keep_children: bool = False) -> tuple[bool, str]:
    """Run a controller-side program; (exit 0, what happened) with its output logged.

    By default whatever the program left in its session is killed once it ends (a
    prolog's stray children must not outlive it). ``keep_children`` is for programs whose
    job is to start something that stays (a power resume program starting a node's agent
    or a cloud request, as slurmctld lets them): only the program itself is waited for,
    its output goes through a file, and its session is killed only on a timeout."""
    import tempfile

    with tempfile.TemporaryFile() as sink:
        try:
            proc = await asyncio.create_subprocess_exec(
                path, *args, env=env, stdin=asyncio.subprocess.DEVNULL,
                stdout=sink if keep_children else asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True, cwd="/")
        except OSError as exc:
            return False, f"cannot run {path}: {exc.strerror or exc}"
        limit = timeout_s if timeout_s > 0 else None
        try:
            if keep_children:
                await asyncio.wait_for(proc.wait(), timeout=limit)
                sink.seek(max(0, os.fstat(sink.fileno()).st_size - 4000))
                out = sink.read(4000)
            else:
                out, _ = await asyncio.wait_for(proc.communicate(), timeout=limit)
        except TimeoutError:
            _kill_session(proc.pid)
            await proc.wait()
            return False, f"timed out after {timeout_s:.0f} s"
        except asyncio.CancelledError:  # the controller is stopping: leave nothing behind
            _kill_session(proc.pid)
            raise
    if not keep_children:
        _kill_session(proc.pid)
    text = out[-4000:].decode(errors="replace").strip()
    if text:
        log.info("%s: %s", path, text.replace("\n", " | "))
    code = proc.returncode or 0
    what = f"exit {code}" if code >= 0 else f"killed by signal {-code}"
    last = text.splitlines()[-1][:200] if text else ""
    return code == 0, what + (f": {last}" if last and code else "")


def _kill_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _interactive(rec: JobRecord) -> bool:
    return rec.sub.extra.get("alloc_holder") == "1" or rec.sub.extra.get("interactive") == "1"


def end_unlaunched(ctl: Controller, rec: JobRecord, now: float) -> None:
    """End a run that never reached an agent as its pending cancel or requeue asks (the
    caller persists): a cancel, requeue or preemption that came while the start was being
    committed (or PrologSlurmctld ran) was sent to an agent that did not know the job,
    so no exit will ever come for it."""
    if rec.requeue_requested:
        ctl.requeue_record(rec, now, hold=rec.requeue_hold)
    else:
        ctl.finish(rec, JobState.CANCELLED, now, reason=rec.end_reason)


def launch_after_prolog(ctl: Controller, rec: JobRecord, req: LaunchRequest,
                        shares: list[tuple[str, LaunchRequest]]) -> None:
    """Launch ``rec`` now, or after PrologSlurmctld when one is configured."""
    path = ctl.cfg.scripts.prolog_slurmctld
    if not path:
        ctl.hub.launch(rec, req, shares)
        return
    rec.prolog_running = True  # shown CONFIGURING meanwhile, as Slurm does
    rec.touch()
    task = asyncio.get_running_loop().create_task(
        _prolog_then_launch(ctl, rec, rec.restarts, req, shares), name=f"prolog-{rec.id}")
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)


_tasks: set[asyncio.Task[Any]] = set()  # running controller-side programs


def spawn(coro: Any, name: str) -> None:
    """Run ``coro`` in the background, kept referenced until it is done."""
    task = asyncio.get_running_loop().create_task(coro, name=name)
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)


async def _prolog_then_launch(ctl: Controller, rec: JobRecord, restarts: int,
                              req: LaunchRequest,
                              shares: list[tuple[str, LaunchRequest]]) -> None:
    cfg = ctl.cfg.scripts
    env = script_environment(rec, ctl.cfg.cluster_name)
    env["SLURM_SCRIPT_CONTEXT"] = "prolog_slurmctld"
    try:
        ok, what = await run_program(cfg.prolog_slurmctld, env, cfg.timeout_s)
    finally:
        rec.prolog_running = False
        rec.touch()
    if not rec.state.is_active or rec.restarts != restarts:
        return  # ended or requeued meanwhile
    if ok:
        if rec.cancel_requested or rec.requeue_requested:
            end_unlaunched(ctl, rec, time.time())  # cancelled while the prolog ran
            await ctl.persist(updates=[rec])
            ctl.sched.trigger()
            return
        ctl.hub.launch(rec, req, shares)
        if rec.state is JobState.SUSPENDED:
            ctl.hub.suspend(rec)  # preempted (suspend mode) while the prolog ran
        return
    log.warning("job %d: PrologSlurmctld %s failed: %s", rec.id, cfg.prolog_slurmctld, what)

    now = time.time()
    why = f"PrologSlurmctld failed: {what}"
    if _interactive(rec) or not rec.sub.spec.requeue:
        ctl.finish(rec, JobState.FAILED, now, exit_code=1, reason=why)
    else:
        ctl.requeue_record(rec, now, hold=False)
        rec.reason_detail = why
    await ctl.persist(updates=[rec])
    ctl.sched.trigger()


def epilog_slurmctld(ctl: Controller, rec: JobRecord) -> None:
    """Start EpilogSlurmctld for a job that ended (if configured); failures are logged."""
    path = ctl.cfg.scripts.epilog_slurmctld
    if not path:
        return
    env = script_environment(rec, ctl.cfg.cluster_name)
    env["SLURM_SCRIPT_CONTEXT"] = "epilog_slurmctld"
    code = rec.exit_code or 0
    env["SLURM_JOB_EXIT_CODE"] = str((code << 8) | (rec.signal & 0x7F))  # a wait status
    env["SLURM_JOB_EXIT_CODE2"] = f"{code}:{rec.signal}"
    env["SLURM_JOB_DERIVED_EC"] = str(code)
    env["SLURM_JOB_STATE"] = rec.state.value  # not in Slurm 22.05: Corral's addition

    async def run() -> None:
        ok, what = await run_program(path, env, ctl.cfg.scripts.timeout_s)
        if not ok:
            log.warning("job %d: EpilogSlurmctld %s failed: %s", rec.id, path, what)

    task = asyncio.get_running_loop().create_task(run(), name=f"epilog-{rec.id}")
    _tasks.add(task)
    task.add_done_callback(_tasks.discard)


def on_script_failure(ctl: Controller, node: str, rec: JobRecord | None,
                      ex: JobExit) -> bool:
    """Apply a failed Prolog/Epilog on ``node``: drain it; for a prolog, requeue the job
    (held unless ``nohold``). True when ``ex`` is fully handled here (the caller skips
    its usual processing)."""
    kind = ex.script_failure
    reason = PROLOG_ERROR if kind == "prolog" else EPILOG_ERROR
    log.warning("node %s: %s for job %d: %s", node, kind, ex.job_id, ex.script_message)
    try:
        nrec = ctl.nodes.get(node)
        if nrec.admin_state != "down":
            ctl.nodes.drain(node, reason)
    except Exception as exc:  # noqa: BLE001 - an unknown node: nothing to drain
        log.warning("cannot drain %s: %s", node, exc)
    if kind != "prolog" or rec is None or not rec.state.is_active \
            or rec.restarts != ex.restarts:
        return False
    if rec.cancel_requested:
        return False  # the cancel's end stands

    now = time.time()
    hold = ctl.cfg.scripts.hold_on_prolog_failure
    detail = f"launch failed requeued held: {reason} on {node} ({ex.script_message})" \
        if hold else f"launch failed requeued: {reason} on {node} ({ex.script_message})"
    if rec.allocation is not None and rec.allocation.nodes[0].node != node:
        # another node's share: end the run everywhere; its batch node's exit requeues
        rec.requeue_requested = True
        rec.requeue_hold = False
        rec.requeue_admin_hold = hold
        rec.reason_detail = detail
        ctl.hub.cancel(rec, 0)
        return True
    ctl.requeue_record(rec, now, admin_hold=hold)
    rec.reason_detail = detail
    return True
