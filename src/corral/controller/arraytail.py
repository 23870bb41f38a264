"""Large job arrays kept compact: the tasks not yet needed live as one record, not as jobs.

Algorithm (Slurm's meta job record, whose pending tasks are a bitmap until they are split
off to start): an array of more than ``WINDOW`` tasks reserves all its ids at submit (task
``k`` is job ``first + k``, as for every array) but becomes job records only for its first
``WINDOW`` tasks; the rest is an ``ArrayTail``: the submission, the index list and the
position of the next task to split off, one database row (``array_tails``). Before each
scheduling cycle ``refill`` splits the next tasks off every tail whose array has fewer than
``WINDOW // 2`` pending records left, so the scheduler always has tasks to start (the
``%`` limit and priorities apply to them as to any task) and memory grows with the tasks
that run or wait near the front, never with the whole array. A submit of 100,000 tasks is
therefore one small transaction.

Views: a tail shows as one pending record (``view``), whose ``array_tail_indices`` names
the remaining indices, so ``squeue``/``sacct`` print the array's remainder as Slurm does
(``12_[1000-99999%10]``). Actions on the whole array reach the tail (cancel: the tail is
CANCELLED at once, as Slurm cancels a pending meta job; hold/release); an action on one
task still in the tail splits that task off first (``split``), then acts on it.

Invariants: the tail's remaining indices are ``indices[next_pos:]`` minus ``taken``
(tasks split off out of order); each index is a record or in the tail, never both; a tail
with nothing remaining is deleted in the transaction that splits its last task off.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from corral.controller.records import JobRecord
from corral.core.model.job import HoldKind, JobState
from corral.core.parse.arrayspec import format_array
from corral.submission import JobSubmission

if TYPE_CHECKING:
    from corral.controller.service import Controller

WINDOW = 1000  # the default of [controller] array_window: pending records per array


@dataclass
class ArrayTail:
    array_job_id: int  # the array's id (= its first task's id)
    sub: JobSubmission
    submit_time: float
    submit_host: str
    indices: tuple[int, ...]  # every index of the array, in order
    next_pos: int  # indices[next_pos:] are not records yet (except ``taken``)
    max_running: int | None
    hold: HoldKind = HoldKind.NONE
    state: JobState = JobState.PENDING  # CANCELLED: the remainder was cancelled
    end_time: float | None = None
    cancelled_by_uid: int | None = None
    taken: set[int] = field(default_factory=set)  # positions split off out of order
    _text: str | None = None

    @property
    def remaining(self) -> int:
        return len(self.indices) - self.next_pos - sum(1 for p in self.taken
                                                      if p >= self.next_pos)

    def positions(self) -> list[int]:
        """The positions still in the tail, in order."""
        return [p for p in range(self.next_pos, len(self.indices)) if p not in self.taken]

    def text(self) -> str:
        """The remaining indices as Slurm prints them (``1000-99999``), cached."""
        if self._text is None:
            rest = [self.indices[p] for p in self.positions()]
            self._text = format_array(rest, None) if rest else ""
        return self._text

    def take(self, n: int) -> list[int]:
        """Split off the next ``n`` positions (in order)."""
        out: list[int] = []
        p = self.next_pos
        while p < len(self.indices) and len(out) < n:
            if p not in self.taken:
                out.append(p)
            p += 1
        self.next_pos = p
        self.taken = {q for q in self.taken if q >= p}
        self._text = None
        return out

    def take_index(self, index: int) -> int | None:
        """Split off the task with array index ``index``; its position, or None when it is
        not in the tail."""
        try:
            pos = self.indices.index(index, self.next_pos)
        except ValueError:
            return None
        if pos in self.taken:
            return None
        self.taken.add(pos)
        self._text = None
        return pos

    def contains(self, index: int) -> bool:
        try:
            pos = self.indices.index(index, self.next_pos)
        except ValueError:
            return False
        return pos not in self.taken

    def record(self, pos: int) -> JobRecord:
        """The job record of the task at ``pos`` (pending, held if the tail is)."""
        rec = JobRecord(
            id=self.array_job_id + pos, sub=self.sub, submit_time=self.submit_time,
            hold=self.hold, submit_host=self.submit_host,
            time_limit_s=self.sub.spec.time_limit_s, array_job_id=self.array_job_id,
            array_task_id=self.indices[pos], array_max_running=self.max_running,
            array_task_count=len(self.indices), array_task_min=self.indices[0],
            array_task_max=self.indices[-1])
        if self.hold is not HoldKind.NONE:
            rec.reason = "JobHeldAdmin" if self.hold is HoldKind.ADMIN else "JobHeldUser"
        return rec

    def view(self, default_partition: str) -> JobRecord:
        """One record standing for the whole remainder (for listings; never stored)."""
        pos = self.positions()[0] if self.remaining else self.next_pos - 1
        rec = self.record(max(pos, 0))
        rec.default_partition = default_partition
        rec.state = self.state
        rec.end_time = self.end_time
        rec.tail_text = self.text()
        if self.state is JobState.CANCELLED:
            rec.reason = "None"
            rec.cancelled_by_uid = self.cancelled_by_uid
        elif self.hold is HoldKind.NONE:
            rec.reason = "Priority"
        return rec

    # ---- the database row -----------------------------------------------------------

    def row(self) -> dict[str, Any]:
        from corral.controller.rows import submission_json

        data = {"submit_time": self.submit_time, "submit_host": self.submit_host,
                "next_pos": self.next_pos, "taken": sorted(self.taken),
                "max_running": self.max_running, "hold": self.hold.value,
                "end_time": self.end_time, "cancelled_by_uid": self.cancelled_by_uid}
        return {"array_job_id": self.array_job_id, "user": self.sub.spec.user,
                "state": self.state.value, "submission": submission_json(self.sub),
                "data": json.dumps(data, separators=(",", ":"))}


def tail_from_row(row: Any) -> ArrayTail:
    from corral.core.parse.arrayspec import parse_array

    sub = JobSubmission.from_json(json.loads(row.submission))
    data = json.loads(row.data)
    arr = parse_array(sub.array or "", max_array_size=2 ** 31)
    return ArrayTail(
        array_job_id=int(row.array_job_id), sub=sub, submit_time=float(data["submit_time"]),
        submit_host=str(data.get("submit_host", "")), indices=arr.indices,
        next_pos=int(data["next_pos"]), max_running=data.get("max_running"),
        hold=HoldKind(data.get("hold", "NONE")), state=JobState(row.state),
        end_time=data.get("end_time"), cancelled_by_uid=data.get("cancelled_by_uid"),
        taken=set(data.get("taken") or ()))


# ---- the controller's side (each function takes the controller whose tails it uses) -----


async def refill(ctl: Controller) -> None:
    """Before a cycle: split tasks off every tail whose array is short of pending records
    (one commit for all of them)."""
    if not ctl.tails:
        return
    window = ctl.cfg.controller.array_window
    new: list[JobRecord] = []
    touched: list[ArrayTail] = []
    for tail in list(ctl.tails.values()):
        if tail.state is not JobState.PENDING:
            continue
        pending = sum(1 for t in ctl.arrays.get(tail.array_job_id, ()) if t in ctl.pending)
        if pending >= window // 2:
            continue
        new.extend(tail.record(p) for p in tail.take(window - pending))
        touched.append(tail)
    if not touched:
        return
    await ctl.persist(inserts=new, tails=touched, announce=False)
    for rec in new:
        ctl._index(rec)
    for tail in touched:
        if not tail.remaining:
            ctl.tails.pop(tail.array_job_id, None)


def views(ctl: Controller, user: str | None = None, name: str | None = None,
          array_ids: set[int] | None = None) -> list[JobRecord]:
    """One listing record per tail that matches (user, name, array ids)."""
    out = []
    for aid, tail in ctl.tails.items():
        if tail.state is not JobState.PENDING or not tail.remaining:
            continue
        if user is not None and tail.sub.spec.user != user:
            continue
        if name is not None and tail.sub.spec.name != name:
            continue
        if array_ids is not None and aid not in array_ids:
            continue
        out.append(view_of(ctl, tail))
    return out


def view_of(ctl: Controller, tail: ArrayTail) -> JobRecord:
    """The tail's listing record, waiting for the reason its pending tasks wait for (so
    squeue shows them and it as one remainder)."""
    view = tail.view(ctl.default_partition)
    if tail.state is JobState.PENDING:
        for t in ctl.arrays.get(tail.array_job_id, ()):
            rec = ctl.pending.get(t)
            if rec is not None and not rec.restarts:
                view.reason = rec.reason
                break
    return view


async def split(ctl: Controller, array_job_id: int, task_ids: set[int] | None) -> None:
    """Make job records of the tail's tasks with these indices (an action names them)."""
    tail = ctl.tails.get(array_job_id)
    if tail is None or tail.state is not JobState.PENDING or not task_ids:
        return
    positions = [p for p in (tail.take_index(i) for i in sorted(task_ids)) if p is not None]
    if not positions:
        return
    new = [tail.record(p) for p in positions]
    await ctl.persist(inserts=new, tails=[tail], announce=False)
    for rec in new:
        ctl._index(rec)
    if not tail.remaining:
        ctl.tails.pop(array_job_id, None)


async def act_whole(ctl: Controller, action: str, array_job_id: int, uid: int,
                    admin: bool, now: float) -> int:
    """An action on a whole array reaches its tail: cancel ends the remainder at once
    (CANCELLED, one event), hold and release change it; the number of tasks touched."""
    tail = ctl.tails.get(array_job_id)
    if tail is None or tail.state is not JobState.PENDING or not tail.remaining:
        return 0
    n = tail.remaining
    view = tail.view(ctl.default_partition)
    view.event_state = "PENDING"
    if action == "cancel":
        tail.state, tail.end_time, tail.cancelled_by_uid = JobState.CANCELLED, now, uid
        view.state, view.end_time, view.end_reason = JobState.CANCELLED, now, ""
        view.cancelled_by_uid = uid
        from corral.core.snapshot import FinishedJob

        # dependencies on the array see a cancelled task (afterok can never be met)
        ctl.finished[view.id] = FinishedJob(
            id=view.id, state=JobState.CANCELLED, exit_code=0, name=tail.sub.spec.name,
            user=tail.sub.spec.user, start_time=None, end_time=now,
            array_job_id=array_job_id, array_task_id=view.array_task_id)
        ctl.tails.pop(array_job_id, None)
        ctl.mail_arrays.tail_cancelled(array_job_id, n)  # its summary mail may be due
        rows = ctl.events.capture((), [view], now)
        ops = [ctl.store.op_save_tail(tail.row())]
        if rows:
            ops.append(ctl.events.op(rows))

        def run(conn: Any) -> None:
            for op in ops:
                op(conn)
        await ctl.store.submit_async(run)
        return n
    if action == "hold":
        tail.hold = HoldKind.ADMIN if admin else HoldKind.USER
    elif action == "release":
        if tail.hold is HoldKind.ADMIN and not admin:
            return 0
        tail.hold = HoldKind.NONE
    else:
        return 0
    await ctl.store.submit_async(ctl.store.op_save_tail(tail.row()))
    return n
