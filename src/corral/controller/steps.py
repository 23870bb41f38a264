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
  jobs that left memory are read from the store when a detail or history record asks;
- an end report may carry the step's resource use (``usage``: per node CPU seconds, peak
  RSS, pids; checked against the step's nodes and tasks, else 4xx): it is kept with the
  step (the row's JSON ``data``; rows written before it simply have none) and shown by
  ``to_api`` (``usage``, ``cpu_time_s``, ``max_rss_mb``; None when not measured). The
  ``.batch`` step has none here: its use is the job's own (``JobRecord.cpu_time_s``).
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import TYPE_CHECKING, Any

from corral.controller.errors import ApiError, is_number
from corral.controller.steprecord import StepRecord
from corral.core.model.job import JobState

if TYPE_CHECKING:
    from corral.controller.auth import Identity
    from corral.controller.records import JobRecord
    from corral.controller.service import Controller

ERROR_MAX = 2000  # characters of a step's error kept
END_STATES = frozenset(s.value for s in JobState if s.is_finished)


_KEEP_JOB_STATE = frozenset({"NODE_FAIL", "OUT_OF_MEMORY"})


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
    if len(recs) > 1 and is_number(ref):
        # an array's first task has the array's id as its own (SLURM_JOB_ID in it): a
        # step names the job itself
        recs = [r for r in recs if r.id == int(ref)] or recs
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
    ntasks = _int(body, "ntasks", 1, low=1) or 1  # null: as if not sent
    num_cpus = _int(body, "num_cpus", 0) or 0
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
    if rec.runtime == "vm":  # its processes live in the guest; a step would run on the host
        msg = (f"job {rec.display_id} runs in a VM: srun steps are not supported there "
               "(run the tasks from the batch script inside the guest)")
        raise ApiError("invalid", msg, slurm=msg)
    step_id = max((s.step_id for s in rec.steps), default=-1) + 1
    assert ntasks is not None and num_cpus is not None
    st = StepRecord(job_id=rec.id, restarts=rec.restarts, step_id=step_id, name=name,
                    argv=list(argv), ntasks=ntasks,
                    nodes=list(nodes) or (list(rec.allocation.node_names)
                                          if rec.allocation else []),
                    num_cpus=num_cpus or (rec.allocation.cpus if rec.allocation else 0),
                    start_time=start if start is not None else time.time(), pid=pid)
    launch = _launch_of(body, rec, step_id) if body.get("launch") is not None else None
    if launch is not None and launch.get("container"):  # srun --container-image
        from corral.containers.spec import ContainerError, ContainerSpec
        from corral.controller.intake import check_container_spec

        try:
            check_container_spec(ContainerSpec.from_text(str(launch["container"])), ctl.cfg)
        except ContainerError as exc:
            raise ApiError("invalid", f"bad container: {exc}", slurm=str(exc)) from None
    if launch is not None:
        st.nodes = list(launch["nodes"])
        st.node_tasks = [list(ids) for ids in launch["tasks"]]
    rec.steps.append(st)
    # the nodes get the launch first, the record commits meanwhile (the store keeps the
    # order of writes: the step's later updates follow its insert); srun hears of the
    # step only once it is stored (a failed write fails srun: its nodes' step processes
    # then find no listener and end)
    missing = ctl.hub.step(rec, launch) if launch is not None else []
    out: dict[str, Any] = {"job_id": rec.id, "step_id": step_id}
    await ctl.store.submit_async(ctl.store.op_insert_step(st.insert_row()))
    if launch is not None:
        if missing:
            st.state, st.exit_code, st.end_time = "NODE_FAIL", 1, time.time()
            await ctl.store.submit_async(ctl.store.op_update_steps([st.update_row()]))
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


_USAGE_NODE_KEYS = ("node", "cpu_time_s", "max_rss_mb", "pids")


def _usage_number(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or value < 0 or value > 1e15):
        raise ApiError("invalid", f"{where} must be a finite number >= 0, not {value!r}")
    return float(value)


def check_usage(raw: Any, st: StepRecord) -> dict[str, Any] | None:
    """An end report's ``usage`` checked against the step: ``{"nodes": {node: {node,
    cpu_time_s, max_rss_mb, pids}}, "cpu_time_s", "max_rss_mb"}`` (numbers finite and
    >= 0, None where a node did not say; at most one entry per node of the step, no more
    pids on a node than its tasks). The totals are the sum (CPU) and the maximum (RSS) of
    the nodes' when nodes are given. None: nothing measured (no usage, or no node
    reported). Raises ``ApiError`` (400) naming the bad field."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ApiError("invalid", "usage must be a JSON object {nodes, cpu_time_s, "
                                  f"max_rss_mb}}, not {type(raw).__name__}")
    total_cpu = _usage_number(raw.get("cpu_time_s"), "usage.cpu_time_s")
    total_rss = _usage_number(raw.get("max_rss_mb"), "usage.max_rss_mb")
    if "nodes" not in raw:
        if total_cpu is None and total_rss is None:
            return None
        return {"nodes": {}, "cpu_time_s": total_cpu, "max_rss_mb": total_rss}
    nodes_raw = raw["nodes"]
    if not isinstance(nodes_raw, dict):
        raise ApiError("invalid", "usage.nodes must map node names to {node, cpu_time_s, "
                                  "max_rss_mb, pids}")
    if len(nodes_raw) > max(len(st.nodes), 1):
        raise ApiError("invalid", f"usage.nodes has {len(nodes_raw)} entries: step "
                                  f"{st.job_id}.{st.step_id} ran on {len(st.nodes)} node(s)")
    index = {n: i for i, n in enumerate(st.nodes)}
    nodes: dict[str, dict[str, Any]] = {}
    for name, entry in nodes_raw.items():
        where = f"usage.nodes[{name!r}]"
        if st.nodes and name not in index:
            raise ApiError("invalid", f"{where}: {name!r} is not a node of step "
                                      f"{st.job_id}.{st.step_id} ({','.join(st.nodes)})")
        if not isinstance(entry, dict):
            raise ApiError("invalid", f"{where} must be a JSON object {{node, cpu_time_s, "
                                      "max_rss_mb, pids}")
        node = entry.get("node", name)
        if node != name:
            raise ApiError("invalid", f"{where}.node must be {name!r}, not {node!r}")
        pids = entry.get("pids", [])
        i = index.get(name)
        most = (len(st.node_tasks[i]) if i is not None and i < len(st.node_tasks)
                else st.ntasks)
        if (not isinstance(pids, list) or len(pids) > most or not all(
                isinstance(p, int) and not isinstance(p, bool) and 0 < p < 1 << 31
                for p in pids)):
            raise ApiError("invalid", f"{where}.pids must be a list of at most {most} "
                                      "process ids")
        nodes[name] = {"node": name,
                       "cpu_time_s": _usage_number(entry.get("cpu_time_s"),
                                                   f"{where}.cpu_time_s"),
                       "max_rss_mb": _usage_number(entry.get("max_rss_mb"),
                                                   f"{where}.max_rss_mb"),
                       "pids": list(pids)}
    if not nodes:
        return None  # srun heard from no node: nothing was measured
    cpus = [u["cpu_time_s"] for u in nodes.values() if u["cpu_time_s"] is not None]
    rss = [u["max_rss_mb"] for u in nodes.values() if u["max_rss_mb"] is not None]
    return {"nodes": nodes,
            "cpu_time_s": round(sum(cpus), 6) if cpus else total_cpu,
            "max_rss_mb": max(rss) if rss else total_rss}


async def end_step(ctl: Controller, ref: str, step: str, body: Any,
                   who: Identity) -> dict[str, Any]:
    """Record the end of a step: ``{state, exit_code, signal, end_time, usage, error}``."""
    if not isinstance(body, dict):
        raise ApiError("invalid", "a step end is a JSON object {state, exit_code, signal, "
                                  "end_time}")
    if not is_number(step) or int(step) >= 2 ** 31:
        raise ApiError("invalid", f"bad step id {step!r}: a step id is a number")
    exit_code = _int(body, "exit_code", 0) or 0  # null: as if not sent
    signal = _int(body, "signal", 0) or 0
    end = _time(body, "end_time")
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
    usage = check_usage(body.get("usage"), st)
    error = body.get("error")
    if error is not None and not isinstance(error, str):
        raise ApiError("invalid", "error must be a string (why the step's tasks could not "
                                  "start)")
    if st.is_open:
        st.error = (error or "")[:ERROR_MAX]
        st.usage = usage
        st.state = str(state)
        st.exit_code = exit_code
        st.signal = signal
        st.end_time = max(end if end is not None else time.time(), st.start_time)
        await ctl.store.submit_async(ctl.store.op_update_steps([st.update_row()]))
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
