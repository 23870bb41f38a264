from __future__ import annotations

import pytest

from corral.core.model import (
    IllegalTransition,
    JobEvent,
    JobState,
    NodeEvent,
    NodeState,
    job_transition,
    node_transition,
)
from corral.core.model.transitions import JOB_TABLE, NODE_TABLE

J, E = JobState, JobEvent
N, NE = NodeState, NodeEvent

NAMED_JOB_TRANSITIONS = [
    (J.PENDING, E.START, J.RUNNING),
    (J.PENDING, E.CANCEL, J.CANCELLED),
    (J.PENDING, E.DEADLINE, J.DEADLINE),
    (J.PENDING, E.FAIL, J.FAILED),
    (J.PENDING, E.BOOT_FAIL, J.BOOT_FAIL),
    (J.RUNNING, E.COMPLETE, J.COMPLETED),
    (J.RUNNING, E.FAIL, J.FAILED),
    (J.RUNNING, E.TIMEOUT, J.TIMEOUT),
    (J.RUNNING, E.CANCEL, J.CANCELLED),
    (J.RUNNING, E.OOM, J.OUT_OF_MEMORY),
    (J.RUNNING, E.NODE_FAIL, J.NODE_FAIL),
    (J.RUNNING, E.BOOT_FAIL, J.BOOT_FAIL),
    (J.RUNNING, E.DEADLINE, J.DEADLINE),
    (J.RUNNING, E.PREEMPT_CANCEL, J.PREEMPTED),
    (J.RUNNING, E.PREEMPT_REQUEUE, J.PENDING),
    (J.RUNNING, E.REQUEUE, J.PENDING),
    (J.RUNNING, E.SUSPEND, J.SUSPENDED),
    (J.RUNNING, E.COMPLETING, J.COMPLETING),
    (J.SUSPENDED, E.RESUME, J.RUNNING),
    (J.SUSPENDED, E.REQUEUE, J.PENDING),
    (J.SUSPENDED, E.PREEMPT_REQUEUE, J.PENDING),
    (J.SUSPENDED, E.CANCEL, J.CANCELLED),
    (J.COMPLETING, E.COMPLETE, J.COMPLETED),
    (J.COMPLETING, E.FAIL, J.FAILED),
    (J.COMPLETED, E.REQUEUE, J.PENDING),
    (J.FAILED, E.REQUEUE, J.PENDING),
    (J.TIMEOUT, E.REQUEUE, J.PENDING),
    (J.CANCELLED, E.REQUEUE, J.PENDING),
    (J.NODE_FAIL, E.REQUEUE, J.PENDING),
    (J.PREEMPTED, E.REQUEUE, J.PENDING),
    (J.OUT_OF_MEMORY, E.REQUEUE, J.PENDING),
]


@pytest.mark.parametrize(("state", "event", "after"), NAMED_JOB_TRANSITIONS)
def test_named_job_transitions(state: JobState, event: JobEvent, after: JobState) -> None:
    assert job_transition(state, event) is after


def test_every_job_event_is_used_somewhere() -> None:
    assert {e for _, e in JOB_TABLE} == set(JobEvent)


@pytest.mark.parametrize(
    ("state", "event"),
    [(J.PENDING, E.COMPLETE), (J.PENDING, E.RESUME), (J.PENDING, E.SUSPEND),
     (J.COMPLETED, E.START), (J.COMPLETED, E.CANCEL), (J.CANCELLED, E.COMPLETE),
     (J.RUNNING, E.START), (J.RUNNING, E.RESUME), (J.SUSPENDED, E.SUSPEND),
     (J.COMPLETING, E.START), (J.BOOT_FAIL, E.REQUEUE), (J.DEADLINE, E.START)],
)
def test_illegal_job_transitions_raise(state: JobState, event: JobEvent) -> None:
    with pytest.raises(IllegalTransition) as ei:
        job_transition(state, event)
    assert str(ei.value) == f"illegal job transition: {event.value} from {state.value}"
    assert ei.value.state == state.value and ei.value.event == event.value


def test_terminal_states_only_leave_by_requeue() -> None:
    for (state, event), _after in JOB_TABLE.items():
        if state.is_finished:
            assert event is E.REQUEUE, (state, event)
    for state in JobState:
        if state.is_finished:
            for event in JobEvent:
                if event is not E.REQUEUE:
                    with pytest.raises(IllegalTransition):
                        job_transition(state, event)


def test_job_state_properties() -> None:
    assert J.RUNNING.is_active and J.SUSPENDED.is_active and J.COMPLETING.is_active
    assert not J.PENDING.is_active and not J.PENDING.is_finished
    assert J.TIMEOUT.is_finished and J.TIMEOUT.short == "TO"
    assert J.PENDING.short == "PD" and J.COMPLETING.short == "CG"
    assert all(s.short for s in JobState)


NAMED_NODE_TRANSITIONS = [
    (N.UNKNOWN, NE.REGISTER, N.IDLE),
    (N.FUTURE, NE.REGISTER, N.IDLE),
    (N.DOWN, NE.REGISTER, N.IDLE),
    (N.IDLE, NE.LOAD_PARTIAL, N.MIXED),
    (N.IDLE, NE.LOAD_FULL, N.ALLOCATED),
    (N.MIXED, NE.LOAD_NONE, N.IDLE),
    (N.ALLOCATED, NE.LOAD_PARTIAL, N.MIXED),
    (N.IDLE, NE.DRAIN, N.DRAINED),
    (N.MIXED, NE.DRAIN, N.DRAINING),
    (N.ALLOCATED, NE.DRAIN, N.DRAINING),
    (N.DRAINING, NE.LOAD_NONE, N.DRAINED),
    (N.DRAINING, NE.RESUME, N.MIXED),
    (N.DRAINED, NE.RESUME, N.IDLE),
    (N.DOWN, NE.RESUME, N.IDLE),
    (N.IDLE, NE.FAIL, N.DOWN),
    (N.ALLOCATED, NE.FAIL, N.DOWN),
    (N.DRAINING, NE.DOWN, N.DOWN),
    (N.UNKNOWN, NE.DOWN, N.DOWN),
]


@pytest.mark.parametrize(("state", "event", "after"), NAMED_NODE_TRANSITIONS)
def test_named_node_transitions(state: NodeState, event: NodeEvent, after: NodeState) -> None:
    assert node_transition(state, event) is after


def test_every_node_state_can_fail_and_every_event_is_used() -> None:
    for s in NodeState:
        assert node_transition(s, NE.FAIL) is N.DOWN
    assert {e for _, e in NODE_TABLE} == set(NodeEvent)


@pytest.mark.parametrize(
    ("state", "event"),
    [(N.IDLE, NE.RESUME), (N.DRAINED, NE.LOAD_FULL), (N.DOWN, NE.LOAD_PARTIAL),
     (N.UNKNOWN, NE.LOAD_NONE), (N.FUTURE, NE.DRAIN)],
)
def test_illegal_node_transitions_raise(state: NodeState, event: NodeEvent) -> None:
    with pytest.raises(IllegalTransition, match="illegal node transition"):
        node_transition(state, event)
