"""Job and node state machines as tables (h11 style): ``TABLE[(state, event)] -> state``.

Every transition has a name (the event); anything not in the table is illegal and raises
``IllegalTransition``. The controller applies events through ``job_transition`` /
``node_transition`` so no code path can, say, complete a job that never started.

Job rules:
- a pending job starts, is cancelled, or (held/limited) stays pending: hold/release and
  admin updates are not state changes;
- a running job ends in exactly one terminal state, or is requeued (preemption with
  REQUEUE, ``scontrol requeue``, node failure of a requeueable job) back to PENDING;
- SUSPENDED exists only where preemption mode SUSPEND is configured;
- terminal states are final, except that ``requeue`` of a finished job (Slurm allows
  ``scontrol requeue`` of COMPLETED/FAILED/... batch jobs) returns it to PENDING.
Node rules: registration brings a node up; drain is admin, down is failure (heartbeat
lost) or admin; resume clears both. ALLOCATED/MIXED/IDLE follow from the load on it.
"""

from __future__ import annotations

from enum import Enum

from corral.core.model.job import JobState
from corral.core.model.node import NodeState


class IllegalTransition(ValueError):
    def __init__(self, kind: str, state: str, event: str) -> None:
        super().__init__(f"illegal {kind} transition: {event} from {state}")
        self.state = state
        self.event = event


class JobEvent(str, Enum):
    START = "start"
    COMPLETE = "complete"  # exit 0
    FAIL = "fail"  # non-zero exit or signal
    TIMEOUT = "timeout"
    CANCEL = "cancel"
    OOM = "oom"
    NODE_FAIL = "node_fail"
    BOOT_FAIL = "boot_fail"
    DEADLINE = "deadline"
    PREEMPT_CANCEL = "preempt_cancel"
    PREEMPT_REQUEUE = "preempt_requeue"
    SUSPEND = "suspend"
    RESUME = "resume"
    REQUEUE = "requeue"
    COMPLETING = "completing"  # end seen, epilog/cleanup running


_J = JobState
_E = JobEvent
_ENDINGS = {
    _E.COMPLETE: _J.COMPLETED,
    _E.FAIL: _J.FAILED,
    _E.TIMEOUT: _J.TIMEOUT,
    _E.CANCEL: _J.CANCELLED,
    _E.OOM: _J.OUT_OF_MEMORY,
    _E.NODE_FAIL: _J.NODE_FAIL,
    _E.PREEMPT_CANCEL: _J.PREEMPTED,
    _E.DEADLINE: _J.DEADLINE,
}

JOB_TABLE: dict[tuple[JobState, JobEvent], JobState] = {
    (_J.PENDING, _E.START): _J.RUNNING,
    (_J.PENDING, _E.CANCEL): _J.CANCELLED,
    (_J.PENDING, _E.DEADLINE): _J.DEADLINE,
    (_J.PENDING, _E.FAIL): _J.FAILED,  # e.g. launch failure before start (bad workdir)
    (_J.PENDING, _E.BOOT_FAIL): _J.BOOT_FAIL,
    (_J.RUNNING, _E.SUSPEND): _J.SUSPENDED,
    (_J.SUSPENDED, _E.RESUME): _J.RUNNING,
    (_J.RUNNING, _E.PREEMPT_REQUEUE): _J.PENDING,
    (_J.RUNNING, _E.REQUEUE): _J.PENDING,
    (_J.SUSPENDED, _E.REQUEUE): _J.PENDING,
    (_J.SUSPENDED, _E.PREEMPT_REQUEUE): _J.PENDING,
    (_J.RUNNING, _E.COMPLETING): _J.COMPLETING,
    (_J.RUNNING, _E.BOOT_FAIL): _J.BOOT_FAIL,
}
for _ev, _end in _ENDINGS.items():
    JOB_TABLE[(_J.RUNNING, _ev)] = _end
    JOB_TABLE[(_J.SUSPENDED, _ev)] = _end
    JOB_TABLE[(_J.COMPLETING, _ev)] = _end
for _st in (_J.COMPLETED, _J.FAILED, _J.TIMEOUT, _J.CANCELLED, _J.OUT_OF_MEMORY, _J.NODE_FAIL,
            _J.PREEMPTED):
    JOB_TABLE[(_st, _E.REQUEUE)] = _J.PENDING


def job_transition(state: JobState, event: JobEvent) -> JobState:
    try:
        return JOB_TABLE[(state, event)]
    except KeyError:
        raise IllegalTransition("job", state.value, event.value) from None


class NodeEvent(str, Enum):
    REGISTER = "register"  # agent registered / came back
    LOAD_NONE = "load_none"  # no allocations left
    LOAD_PARTIAL = "load_partial"
    LOAD_FULL = "load_full"
    DRAIN = "drain"
    RESUME = "resume"
    FAIL = "fail"  # heartbeat lost or agent reported failure
    DOWN = "down"  # admin set down


_N = NodeState
_NE = NodeEvent
NODE_TABLE: dict[tuple[NodeState, NodeEvent], NodeState] = {}
for _ns in (_N.UNKNOWN, _N.FUTURE, _N.DOWN):
    NODE_TABLE[(_ns, _NE.REGISTER)] = _N.IDLE
for _ns in (_N.IDLE, _N.MIXED, _N.ALLOCATED):
    NODE_TABLE[(_ns, _NE.LOAD_NONE)] = _N.IDLE
    NODE_TABLE[(_ns, _NE.LOAD_PARTIAL)] = _N.MIXED
    NODE_TABLE[(_ns, _NE.LOAD_FULL)] = _N.ALLOCATED
    NODE_TABLE[(_ns, _NE.REGISTER)] = _ns
    NODE_TABLE[(_ns, _NE.DRAIN)] = _N.DRAINING if _ns != _N.IDLE else _N.DRAINED
for _ns in (_N.DRAINING,):
    NODE_TABLE[(_ns, _NE.LOAD_NONE)] = _N.DRAINED
    NODE_TABLE[(_ns, _NE.LOAD_PARTIAL)] = _N.DRAINING
    NODE_TABLE[(_ns, _NE.LOAD_FULL)] = _N.DRAINING
    NODE_TABLE[(_ns, _NE.REGISTER)] = _N.DRAINING
    NODE_TABLE[(_ns, _NE.DRAIN)] = _N.DRAINING
    NODE_TABLE[(_ns, _NE.RESUME)] = _N.MIXED
NODE_TABLE[(_N.DRAINED, _NE.DRAIN)] = _N.DRAINED
NODE_TABLE[(_N.DRAINED, _NE.REGISTER)] = _N.DRAINED
NODE_TABLE[(_N.DRAINED, _NE.LOAD_NONE)] = _N.DRAINED
NODE_TABLE[(_N.DRAINED, _NE.RESUME)] = _N.IDLE
NODE_TABLE[(_N.DOWN, _NE.RESUME)] = _N.IDLE
NODE_TABLE[(_N.DOWN, _NE.DRAIN)] = _N.DOWN
NODE_TABLE[(_N.DOWN, _NE.LOAD_NONE)] = _N.DOWN
for _ns in NodeState:
    NODE_TABLE[(_ns, _NE.FAIL)] = _N.DOWN
    NODE_TABLE[(_ns, _NE.DOWN)] = _N.DOWN


def node_transition(state: NodeState, event: NodeEvent) -> NodeState:
    try:
        return NODE_TABLE[(state, event)]
    except KeyError:
        raise IllegalTransition("node", state.value, event.value) from None
