"""``ClusterSnapshot``: the whole input of one scheduling cycle, frozen.

The shell (controller or simulator) builds it from its records; the core never reads
anything else. ``running`` holds every job that occupies resources (RUNNING, SUSPENDED,
COMPLETING) with its allocation; ``pending`` every PENDING job (held ones included: the
core explains why they wait). ``finished`` gives the end state of jobs that other jobs
depend on. ``usage`` is decayed usage per association ``(account, user)`` in
CPU-seconds, already decayed to ``now`` by the shell (see ``core.priority.decay``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from corral.core.decisions import Reserve
from corral.core.model.account import AccountTree
from corral.core.model.job import Job, JobState
from corral.core.model.node import Node
from corral.core.model.partition import Partition, Qos
from corral.core.model.reservation import AdvanceReservation
from corral.core.model.resources import GresItems


@dataclass(frozen=True, slots=True)
class FinishedJob:
    id: int
    state: JobState
    exit_code: int = 0
    name: str = ""
    user: str = ""
    start_time: float | None = None
    end_time: float | None = None
    array_job_id: int | None = None
    array_task_id: int | None = None


@dataclass(frozen=True)
class ClusterSnapshot:
    nodes: tuple[Node, ...]
    partitions: tuple[Partition, ...]
    qos: tuple[Qos, ...] = ()
    accounts: AccountTree = field(default_factory=AccountTree)
    pending: tuple[Job, ...] = ()
    running: tuple[Job, ...] = ()
    # pending jobs on a user or admin hold that the shell keeps out of ``pending``: the
    # queue pass cannot start them, so it does not visit them (no priority, reason or
    # estimate); dependency lookups still see them as pending (a target found nowhere
    # would count as purged, hence satisfied)
    held: tuple[Job, ...] = ()
    finished: Mapping[int, FinishedJob] = field(default_factory=dict)
    usage: Mapping[tuple[str, str], float] = field(default_factory=dict)
    licenses: GresItems = ()
    generation: int = 0
    # ids holding a persistent reservation (ReservationPolicy.HIGHEST), in the order they got
    # it; the shell copies ``CycleResult.reserved`` here for the next cycle
    reserved: tuple[int, ...] = ()
    # the previous cycle's ``CycleResult.reservations``: conservative backfill keeps them as
    # guarantees (a job's new reservation is never later than its previous one)
    reservations: tuple[Reserve, ...] = ()
    # the shell vouches that ``pending`` is in (submit_time, id) order and that no pending
    # job has an admin priority, as a simulator that appends arrivals keeps it:
    # first-come-first-served ordering then takes it as it is (no sort, no scan)
    pending_in_submit_order: bool = False
    # advance reservations (``corral.core.advance``) and the reservation each pending job
    # asked for by name (job id -> name)
    advance: tuple[AdvanceReservation, ...] = ()
    job_reservations: Mapping[int, str] = field(default_factory=dict)
    # nodes that cannot run work before a time: powered down (ready at now + their boot
    # time if resumed now) or powering up (``corral.core.boot``); name -> ready time
    boot_ready: Mapping[str, float] = field(default_factory=dict)

    def partition(self, name: str) -> Partition | None:
        for p in self.partitions:
            if p.name == name:
                return p
        return None

    def default_partition(self) -> Partition | None:
        for p in self.partitions:
            if p.is_default:
                return p
        return self.partitions[0] if self.partitions else None
