"""Job steps: what ``srun`` runs inside a job, recorded by the controller.

A step belongs to one run of a job (``restarts``): ``srun`` asks for a step id with
``POST /api/v1/jobs/<id>/steps`` and reports the end with ``POST .../steps/<n>/end``.
Step ids count from 0 within a run, as Slurm's do (a requeued job starts again at 0; the
older run's steps stay in the database). ``sacct`` shows them as ``<id>.<n>`` rows.

Invariants:
- ids are allocated on the controller's event loop, without an ``await`` between reading
  the highest id and appending the new step, so concurrent ``srun`` calls of one job never
  get the same id;
- a step is committed before its id is returned (persist first, then answer);
- a job that ends (or is requeued) with steps still open closes them: ``CANCELLED`` (the
  job's end killed them), or the job's own state for ``NODE_FAIL``/``OUT_OF_MEMORY``; a
  later end report of such a step changes nothing;
- the steps of active jobs are in memory (``JobRecord.steps``, loaded at start); those of
  jobs that left memory are read from the store when a detail or history record asks.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from corral.controller.errors import ApiError
from corral.core.model.job import JobState

if TYPE_CHECKING:
    from corral.controller.auth import Identity
    from corral.controller.records import JobRecord
    from corral.controller.service import Controller

END_STATES = frozenset(s.value for s in JobState if s.is_finished)
_KEEP_JOB_STATE = frozenset({"NODE_FAIL", "OUT_OF_MEMORY"})


@dataclass(slots=True)
class StepRecord:
    job_id: int
    restarts: int
    step_id: int
    name: str
    argv: list[str]
    ntasks: int
    nodes: list[str]
    num_cpus: int
    start_time: float
    pid: int | None = None
    state: str = "RUNNING"
    end_time: float | None = None
    exit_code: int | None = None
    signal: int = 0

    @property
    def is_open(self) -> bool:
        return self.end_time is None

    def to_api(self) -> dict[str, Any]:
        return {
            "step_id": self.step_id, "job_id": self.job_id, "restarts": self.restarts,
            "name": self.name, "argv": list(self.argv), "ntasks": self.ntasks,
            "nodes": list(self.nodes), "num_cpus": self.num_cpus,
            "start_time": self.start_time, "end_time": self.end_time, "state": self.state,
            "exit_code": self.exit_code, "signal": self.signal, "pid": self.pid,
        }

    def _data(self) -> str:
        return json.dumps({"argv": self.argv, "ntasks": self.ntasks, "nodes": self.nodes,
                           "num_cpus": self.num_cpus, "pid": self.pid,
                           "exit_code": self.exit_code, "signal": self.signal},
                          separators=(",", ":"))

    def insert_row(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "restarts": self.restarts, "step_id": self.step_id,
                "name": self.name, "state": self.state, "start_time": self.start_time,
                "end_time": self.end_time, "data": self._data()}

    def update_row(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "restarts": self.restarts, "step_id": self.step_id,
                "state": self.state, "end_time": self.end_time, "data": self._data()}

    @staticmethod
    def from_row(row: Any) -> StepRecord:
        data = json.loads(row.data)
        return StepRecord(
            job_id=int(row.job_id), restarts=int(row.restarts), step_id=int(row.step_id),
            name=str(row.name), argv=[str(a) for a in data.get("argv") or []],
            ntasks=int(data.get("ntasks") or 1), nodes=[str(n) for n in data.get("nodes") or []],
            num_cpus=int(data.get("num_cpus") or 0), start_time=float(row.start_time),
            pid=data.get("pid"), state=str(row.state), end_time=row.end_time,
            exit_code=data.get("exit_code"), signal=int(data.get("signal") or 0))


def close_open_steps(rec: JobRecord, job_state: JobState, now: float) -> None:
    """The job ended (or is being requeued): end the steps still open (in memory; the
    caller's ``persist`` writes them)."""
    state = job_state.value if job_state.value in _KEEP_JOB_STATE else "CANCELLED"
    for st in rec.steps:
        if st.is_open:
            st.state = state
            st.end_time = now
            st.exit_code = st.exit_code if st.exit_code is not None else 0
            st.signal = st.signal or (15 if state == "CANCELLED" else 0)
            rec.steps_unsaved.append(st)


def attach_loaded(recs: dict[int, JobRecord], rows: list[Any]) -> None:
    """Give loaded step rows to their records (only the steps of each record's run)."""
    for row in rows:
        rec = recs.get(int(row.job_id))
        if rec is not None and int(row.restarts) == rec.restarts:
            rec.steps.append(StepRecord.from_row(row))


# ---- API operations --------------------------------------------------------------------

def _int(body: dict[str, Any], key: str, default: int | None, *, low: int = 0) -> int | None:
    value = body.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value:
        raise ApiError("invalid", f"{key} must be an integer, not {value!r}")
    if int(value) < low:
        raise ApiError("invalid", f"{key} must be at least {low}, not {value}")
    return int(value)


def _time(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ApiError("invalid", f"{key} must be a time in epoch seconds, not {value!r}")
    return float(value)


async def _the_job(ctl: Controller, ref: str, who: Identity) -> JobRecord:
    recs = await ctl.resolve(ref)
    if not recs:
        raise ApiError("not_found", f"Invalid job id specified: {ref}",
                       slurm="Invalid job id specified")
    if len(recs) > 1:
        raise ApiError("invalid", f"{ref} names {len(recs)} array tasks: a step belongs to "
                                  "one job (use <array id>_<task> or the task's own id)")
    rec = recs[0]
    ctl._check_owner(rec, who)
    return rec


async def start_step(ctl: Controller, ref: str, body: Any, who: Identity) -> dict[str, Any]:
    """Record a new step of a running job; returns ``{"job_id", "step_id"}``."""
    if not isinstance(body, dict):
        raise ApiError("invalid", "a step is a JSON object {name, argv, ntasks, nodes, "
                                  "num_cpus, start_time, pid}")
    argv = body.get("argv") or []
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ApiError("invalid", "argv must be a list of strings")
    nodes = body.get("nodes") or []
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        raise ApiError("invalid", "nodes must be a list of node names")
    name = body.get("name")
    if name is None:
        name = argv[0].rsplit("/", 1)[-1] if argv else "step"
    if not isinstance(name, str) or not name:
        raise ApiError("invalid", "name must be a non-empty string")
    ntasks = _int(body, "ntasks", 1, low=1)
    num_cpus = _int(body, "num_cpus", 0)
    pid = _int(body, "pid", None, low=1)
    start = _time(body, "start_time")
    rec = await _the_job(ctl, ref, who)
    if rec.state is JobState.PENDING:
        raise ApiError("conflict", f"job {rec.display_id} is pending: a step needs a running "
                                   "job", slurm="Job is pending execution")
    if not rec.state.is_active or rec.cancel_requested or rec.requeue_requested:
        raise ApiError("conflict", f"job {rec.display_id} is not running (it is "
                                   f"{rec.state.value}): no new steps",
                       slurm="Job/step already completing or completed")
    step_id = max((s.step_id for s in rec.steps), default=-1) + 1
    assert ntasks is not None and num_cpus is not None
    st = StepRecord(job_id=rec.id, restarts=rec.restarts, step_id=step_id, name=name,
                    argv=list(argv), ntasks=ntasks,
                    nodes=list(nodes) or (list(rec.allocation.node_names)
                                          if rec.allocation else []),
                    num_cpus=num_cpus or (rec.allocation.cpus if rec.allocation else 0),
                    start_time=start if start is not None else time.time(), pid=pid)
    launch = _launch_of(body, rec, step_id) if body.get("launch") is not None else None
    if launch is not None:
        st.nodes = list(launch["nodes"])
    rec.steps.append(st)
    await asyncio.wrap_future(ctl.store.submit(ctl.store.op_insert_step(st.insert_row())))
    out: dict[str, Any] = {"job_id": rec.id, "step_id": step_id}
    if launch is not None:
        missing = ctl.hub.step(rec, launch)
        if missing:
            st.state, st.exit_code, st.end_time = "NODE_FAIL", 1, time.time()
            await asyncio.wrap_future(ctl.store.submit(ctl.store.op_update_steps(
                [st.update_row()])))
            raise ApiError("conflict", f"cannot launch step {rec.id}.{step_id}: node(s) "
                                       f"{','.join(missing)} not responding",
                           slurm="Unable to contact slurm controller (connect failure)")
        out["nodes"] = launch["nodes"]
    return out


def _launch_of(body: dict[str, Any], rec: JobRecord, step_id: int) -> dict[str, Any]:
    """The ``launch`` part of a step request, checked against the job (its nodes must
    be nodes of the allocation), as sent to the agents (``corral.protocol.step``)."""
    from corral.protocol.step import StepLaunch

    raw = body["launch"]
    if not isinstance(raw, dict):
        raise ApiError("invalid", "launch must be a JSON object (corral.protocol.step)")
    data = dict(raw, job_id=rec.id, restarts=rec.restarts, step_id=step_id)
    try:
        launch = StepLaunch.from_json(data)
    except (TypeError, ValueError) as exc:
        raise ApiError("invalid", str(exc)) from None
    alloc = list(rec.allocation.node_names) if rec.allocation else []
    bad = [n for n in launch.nodes if n not in alloc]
    if bad or len(set(launch.nodes)) != len(launch.nodes):
        raise ApiError("invalid", f"step nodes {','.join(launch.nodes)} are not distinct "
                                  f"nodes of job {rec.display_id}'s allocation "
                                  f"({','.join(alloc)})",
                       slurm="Requested node configuration is not available")
    if len(launch.env) > 4096 or sum(len(k) + len(v) for k, v in launch.env.items()) > 1 << 20:
        raise ApiError("invalid", "a step's environment is limited to 4096 variables, 1 MiB")
    return launch.to_json()


async def end_step(ctl: Controller, ref: str, step: str, body: Any,
                   who: Identity) -> dict[str, Any]:
    """Record the end of a step: ``{state, exit_code, signal, end_time}``."""
    if not isinstance(body, dict):
        raise ApiError("invalid", "a step end is a JSON object {state, exit_code, signal, "
                                  "end_time}")
    if not step.isdigit():
        raise ApiError("invalid", f"bad step id {step!r}: a step id is a number")
    exit_code = _int(body, "exit_code", 0)
    signal = _int(body, "signal", 0)
    end = _time(body, "end_time")
    assert exit_code is not None and signal is not None
    if exit_code > 255:
        raise ApiError("invalid", f"exit_code must be 0..255, not {exit_code}")
    state = body.get("state")
    if state is None:
        state = "COMPLETED" if exit_code == 0 and not signal else (
            "CANCELLED" if signal else "FAILED")
    if state not in END_STATES:
        raise ApiError("invalid", f"state must be one of {', '.join(sorted(END_STATES))}, "
                                  f"not {state!r}")
    rec = await _the_job(ctl, ref, who)
    st = next((s for s in rec.steps if s.step_id == int(step)), None)
    if st is None:
        raise ApiError("not_found", f"job {rec.display_id} has no step {step} in its current "
                                    "run", slurm="Invalid job id specified")
    if st.is_open:
        st.state = str(state)
        st.exit_code = exit_code
        st.signal = signal
        st.end_time = max(end if end is not None else time.time(), st.start_time)
        await asyncio.wrap_future(ctl.store.submit(ctl.store.op_update_steps(
            [st.update_row()])))
    return st.to_api()


async def steps_api(ctl: Controller, recs: list[JobRecord]) -> dict[int, list[dict[str, Any]]]:
    """Step records (API form) of each job's current run: memory for the records held in
    ``ctl.jobs``, the store for the others (one query)."""
    out: dict[int, list[dict[str, Any]]] = {}
    missing: dict[int, JobRecord] = {}
    for rec in recs:
        if ctl.jobs.get(rec.id) is rec:
            out[rec.id] = [s.to_api() for s in rec.steps]
        elif rec.start_time is not None or rec.restarts:
            missing[rec.id] = rec
        else:
            out[rec.id] = []
    if missing:
        loop = asyncio.get_running_loop()
        rows = await loop.run_in_executor(None, ctl.store.load_steps, list(missing))
        for rec in missing.values():
            out[rec.id] = []
        for row in rows:
            rec = missing[int(row.job_id)]
            if int(row.restarts) == rec.restarts:
                out[rec.id].append(StepRecord.from_row(row).to_api())
    return out
