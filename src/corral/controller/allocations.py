"""Interactive allocations (``salloc``, ``srun`` outside a job) held by a caller anywhere.

An allocation is a job submitted with ``extra["alloc_holder"] = "1"``: it runs nothing
itself. Every node of it, the first included, gets a *share* of the job (its cores,
memory, GPUs and cgroup, ``corral.controller.scheduler.share_request``), where the
caller's ``srun`` steps run through the agents. The caller may be on a login host that
shares nothing with the nodes but the network: everything goes through the API.

- ``GET  /jobs/<id>/environment``: the job's ``SLURM_*`` variables for the caller (owner
  or operator; only while it runs);
- ``POST /jobs/<id>/allocation/keepalive``: the caller is alive (every
  ``KEEPALIVE_S``); an allocation not kept alive for ``alloc_timeout_s`` is ended
  (its caller died, as slurmctld ends an allocation whose salloc stopped answering);
- ``POST /jobs/<id>/allocation/release`` ``{exit_code}``: the caller's command ended:
  the shares are stopped and the job ends COMPLETED (0) or FAILED with that code.

Invariants: the release is idempotent and only by the owner or an operator; an
allocation's end state comes from the release, never from the shares' own exits.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from corral.controller.env import job_environment
from corral.controller.errors import ApiError
from corral.core.model.job import JobState

if TYPE_CHECKING:
    from corral.controller.auth import Identity
    from corral.controller.records import JobRecord
    from corral.controller.service import Controller

log = logging.getLogger("corral.allocations")

KEEPALIVE_S = 10.0
ALLOC_TIMEOUT_S = 60.0
RELEASED = "ALLOC:"  # JobRecord.fail_state prefix: released with this exit code


def is_holder(rec: JobRecord) -> bool:
    return rec.sub.extra.get("alloc_holder") == "1"


async def _the_allocation(ctl: Controller, ref: str, who: Identity) -> JobRecord:
    recs = await ctl.resolve(ref)
    if len(recs) != 1:
        raise ApiError("not_found", f"Invalid job id specified: {ref}",
                       slurm="Invalid job id specified")
    rec = recs[0]
    ctl._check_owner(rec, who)
    return rec


async def environment(ctl: Controller, ref: str, who: Identity) -> dict[str, Any]:
    rec = await _the_allocation(ctl, ref, who)
    if rec.state is not JobState.RUNNING or rec.allocation is None:
        raise ApiError("conflict", f"job {rec.display_id} is {rec.state.value}: it has no "
                                   "environment yet", slurm="Job is pending execution")
    env = {k: v for k, v in job_environment(rec, ctl.cfg.cluster_name, ctl.host).items()
           if k.startswith(("SLURM_", "CORRAL_", "PBS_")) or k in (
               "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "OMP_NUM_THREADS")}
    rec.alloc_seen = time.time()
    return {"job_id": rec.id, "environment": env}


async def keepalive(ctl: Controller, ref: str, who: Identity) -> dict[str, Any]:
    rec = await _the_allocation(ctl, ref, who)
    rec.alloc_seen = time.time()
    return {"job_id": rec.id, "state": rec.state.value}


async def release(ctl: Controller, ref: str, body: Any, who: Identity) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError("invalid", "a release is a JSON object {exit_code}")
    code = body.get("exit_code", 0)
    if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 255:
        raise ApiError("invalid", f"exit_code must be an integer 0..255, not {code!r}")
    rec = await _the_allocation(ctl, ref, who)
    if not is_holder(rec):
        raise ApiError("invalid", f"job {rec.display_id} is not an interactive allocation")
    if rec.state is JobState.PENDING:
        await ctl.act("cancel", [str(rec.id)], who, {})
    elif rec.state.is_active and not rec.fail_state.startswith(RELEASED):
        end(ctl, rec, code, "")
    return {"job_id": rec.id, "state": rec.state.value}


def end(ctl: Controller, rec: JobRecord, code: int, why: str) -> None:
    """Stop a running allocation's shares; its exit gives the state (``final_state``)."""
    rec.cancel_requested = True
    rec.fail_state = f"{RELEASED}{code}"
    if why:
        rec.end_reason = why
    rec.touch()
    if ctl.hub.connected(rec):
        ctl.hub.cancel(rec, 0)


def final_state(rec: JobRecord) -> tuple[JobState, int] | None:
    """(state, exit code) of a released allocation, None for any other job."""
    if not rec.fail_state.startswith(RELEASED):
        return None
    code = int(rec.fail_state[len(RELEASED):] or 0)
    if rec.end_reason:
        return JobState.CANCELLED, code
    return (JobState.COMPLETED if code == 0 else JobState.FAILED), code


def check_keepalives(ctl: Controller, now: float) -> None:
    """End allocations whose caller stopped keeping them alive."""
    for rec in list(ctl.running.values()):
        if not is_holder(rec) or rec.cancel_requested or rec.state is not JobState.RUNNING:
            continue
        seen = rec.alloc_seen or rec.start_time or now
        if now - seen > ALLOC_TIMEOUT_S:
            log.warning("allocation %d: no keepalive for %.0f s: its caller is gone",
                        rec.id, now - seen)
            end(ctl, rec, 1, "the salloc/srun holding the allocation stopped answering")
