"""RLScheduler (Zhang et al., SC'20) compatibility policy: the authors' heuristic loop.

Algorithm (as implemented in DIR-LAB/deep-batch-scheduler ``HPCSimPickJobs.py`` and
described in ``shared/reference/sim/rlscheduler-sc20.md``):

* A persistent list ``queue`` of arrived jobs. Each round stable-sorts it by the policy
  key (ascending) and takes ``head = queue[0]``. A head that fits starts at once; the
  round repeats without advancing time.
* A head that does not fit stays the head until it starts. Without backfilling, events
  are processed one at a time until it fits; arrivals in between are not considered.
* With "backfilling", a shadow time is computed once when the head blocks (running jobs
  sorted in place by ``start + estimate``; the estimate end at which the freed processors
  first cover the head). Until the head fits: stable-sort ``queue`` by submit time (this
  changes the persistent order, whatever the policy), start every queued job that fits now
  and satisfies ``now + estimate < shadow`` (strict, no extra-nodes rule), then process one
  event. The shadow time is never recomputed during the episode.
* Events: the next arrival (in list order) against the earliest *actual* completion; an
  arrival wins ties; ``clock = max(clock, event time)``. The running list is kept and
  re-sorted in place exactly as the authors do, because the order of simultaneous
  completions depends on it. Jobs always run their recorded run time (never killed).
* A job takes ``ceil(procs / procs_per_node)`` whole nodes; only the free count matters.

Invariants: pure and deterministic; a job never starts twice; free nodes never go
negative; ``replay`` raises ``ValueError`` for a job larger than the machine (the authors'
loop would spin). Keys are passed in by the caller (the published numbers were computed
with numpy float64; ``policy_key`` gives the same formulas with ``math``).

This is deliberately *not* the general core's EASY backfill: it exists to reproduce the
published table cells exactly. See ``docs/sim/rlscheduler.md`` for how they differ.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

POLICIES = ("FCFS", "WFP3", "UNI", "SJF", "F1", "F2", "F3", "F4")


@dataclass(frozen=True, slots=True)
class RlsJob:
    """One job as the authors' loader reads it (times in trace seconds)."""

    job_id: int
    submit_s: int
    run_s: int
    req_s: int
    procs: int


@dataclass(frozen=True, slots=True)
class RlsResult:
    """Per-job start times (index-aligned with the input) and the final clock."""

    start_s: tuple[float, ...]
    last_start_s: float


def policy_key(policy: str, job: RlsJob) -> Any:
    """The authors' priority key (sorted ascending) with ``math`` functions.

    WFP3 and UNI use the queued job's ``scheduled_time == -1``: ``w = -1 - submit``.
    """
    s, r, n = job.submit_s, job.req_s, job.procs
    if policy == "FCFS":
        return s
    if policy == "SJF":
        return (r, s)
    if policy == "F1":
        return math.log10(r if r > 0 else 0.1) * n + 870 * math.log10(s if s > 0 else 0.1)
    if policy == "F2":
        return math.sqrt(r) * n + 25600 * math.log10(s)
    if policy == "F3":
        return r * n + 6860000 * math.log10(s)
    if policy == "F4":
        return r * math.sqrt(n) + 530000 * math.log10(s)
    w = -1 - s
    if policy == "WFP3":
        return -math.pow(float(w) / r, 3) * n
    if policy == "UNI":
        return -(w + 1e-15) / (math.log2(n + 1e-15) * r)
    raise ValueError(f"unknown RLScheduler policy {policy!r}; choose from {', '.join(POLICIES)}")


def replay(
    jobs: Sequence[RlsJob],
    keys: Sequence[Any],
    *,
    nodes: int,
    procs_per_node: float = 1.0,
    backfill: bool = False,
) -> RlsResult:
    """Schedule ``jobs`` (in arrival order) on an empty machine; return start times."""
    n = len(jobs)
    if n == 0:
        return RlsResult((), 0.0)
    if len(keys) != n:
        raise ValueError("one key per job is required")
    submit = [j.submit_s for j in jobs]
    run = [j.run_s for j in jobs]
    req = [j.req_s for j in jobs]
    procs = [j.procs for j in jobs]
    need = [int(math.ceil(float(p) / float(procs_per_node))) for p in procs]
    for i, k in enumerate(need):
        if k > nodes:
            raise ValueError(f"job {jobs[i].job_id} needs {k} nodes; the machine has {nodes}")
    start: list[float] = [-1.0] * n
    end_by_start_run: Callable[[int], float] = lambda i: start[i] + run[i]  # noqa: E731
    end_by_estimate: Callable[[int], float] = lambda i: start[i] + req[i]  # noqa: E731
    key_of: Callable[[int], Any] = keys.__getitem__
    submit_of: Callable[[int], int] = submit.__getitem__

    st = _State(clock=float(submit[0]), free=nodes, next_arrival=1)
    queue: list[int] = [0]
    running: list[int] = []

    def next_event() -> None:
        """Process one event: the next arrival or the earliest actual completion."""
        if running:
            running.sort(key=end_by_start_run)
            rel_t = start[running[0]] + run[running[0]]
        else:
            rel_t = math.inf
        if st.next_arrival < n and submit[st.next_arrival] <= rel_t:
            st.clock = max(st.clock, float(submit[st.next_arrival]))
            queue.append(st.next_arrival)
            st.next_arrival += 1
        else:
            if not running:
                raise ValueError("no event left while a job waits (job larger than the machine?)")
            st.clock = max(st.clock, rel_t)
            st.free += need[running.pop(0)]

    def begin(i: int) -> None:
        start[i] = st.clock
        st.free -= need[i]
        running.append(i)
        queue.remove(i)

    while True:
        queue.sort(key=key_of)
        head = queue[0]
        if need[head] > st.free:
            if backfill:
                shadow = st.clock
                running.sort(key=end_by_estimate)
                free_procs = st.free * procs_per_node
                for r in running:
                    free_procs += need[r] * procs_per_node
                    shadow = start[r] + req[r]
                    if free_procs >= procs[head]:
                        break
                while need[head] > st.free:
                    queue.sort(key=submit_of)
                    for j in list(queue):
                        if st.clock + req[j] < shadow and need[j] <= st.free:
                            begin(j)
                    next_event()
            else:
                while need[head] > st.free:
                    next_event()
        begin(head)
        if queue:
            continue
        if st.next_arrival >= n:
            break
        while not queue:
            next_event()
    return RlsResult(tuple(start), st.clock)


@dataclass(slots=True)
class _State:
    clock: float
    free: int
    next_arrival: int
