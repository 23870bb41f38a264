"""One mail for a whole job array (``--mail-type`` without ``ARRAY_TASKS``), as Slurm's
"Array Summary" mails.

Policy:

- ``BEGIN``: when the array's first task starts (``Slurm Array Summary Job_id=12_* (12)
  Name=x Began``); later tasks' starts mail nothing;
- ``END`` / ``FAIL``: when the array's last task has ended (``Slurm Array Summary
  Job_id=12_* (12) Name=x Ended, COMPLETED, ExitCode [0-0]``): ``Failed`` with ``FAIL``
  when a task failed, else ``Ended`` with ``END``; the state is ``Mixed`` when some tasks
  exited 0 and others not, else the last task's; ``ExitCode [min-max]`` over the tasks;
- other types (``REQUEUE``, ``TIME_LIMIT*``, ``INVALID_DEPEND``) are not mailed for an
  array's tasks without ``ARRAY_TASKS``.

How the last task is known without scanning the array at each end: on the first task
end seen for an array, the tasks still unfinished are counted once (its records not
finished plus its compact tail, ``corral.controller.arraytail``); each later task end
takes one off, and a cancelled tail takes off all it held. The counts live in memory; at
the first end seen the states and exit-code range of the tasks that ended before are
read from the store too (one aggregate query, off the event loop, ``Store.array_ended``;
the summary waits for it), so a controller restarted while an array runs still mails the
whole array's range and state (the tasks of a compact tail cancelled before the restart
are not in it). The mails themselves are keyed by the array (``a<array>.BEGIN``,
``a<array>.END``/``FAIL``) in the outbox, so a restarted controller never mails an
array's ``BEGIN`` twice.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from corral.core.model.job import JobState

if TYPE_CHECKING:
    from corral.controller.records import JobRecord
    from corral.controller.service import Controller

log = logging.getLogger("corral.mail")


@dataclass(slots=True)
class _Ended:
    left: int  # tasks not finished yet
    exit_min: int | None = None
    exit_max: int | None = None
    failed: bool = False
    last: JobRecord | None = None
    states: set[str] = field(default_factory=set)
    reading: bool = False  # the stored ends are being read (the summary waits)


class ArrayMail:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.begun: set[int] = set()  # arrays whose BEGIN was mailed (or not to mail)
        self.ended: dict[int, _Ended] = {}

    def task_event(self, rec: JobRecord, event: str, kinds: set[str]) -> None:
        """Task ``rec`` of an array started (``BEGIN``) or ended (``END``)."""
        aid = rec.array_job_id
        if aid is None:
            return
        if event == "BEGIN":
            if aid in self.begun:
                return
            self.begun.add(aid)
            if "BEGIN" in kinds and not self._started_before(aid, rec):
                self._send(rec, "BEGIN", "Began", "")
            return
        st = self.ended.get(aid)
        if st is None:  # first end seen: count what is left once (this task is finished)
            st = self.ended[aid] = _Ended(left=self._unfinished(aid))
            self._read_stored(aid, st)
        else:
            st.left -= 1
        self._note(st, rec)
        self._maybe_done(aid, st, kinds)

    def tail_cancelled(self, array_job_id: int, tasks: int) -> None:
        """The compact tail of an array, ``tasks`` tasks, was cancelled at once."""
        st = self.ended.get(array_job_id)
        if st is None or st.last is None:
            return  # no task ended yet: the first end counts without the tail
        st.left -= tasks
        st.states.add(JobState.CANCELLED.value)
        st.exit_min = 0 if st.exit_min is None else min(st.exit_min, 0)
        st.exit_max = 0 if st.exit_max is None else max(st.exit_max, 0)
        from corral.controller.mail import _types

        self._maybe_done(array_job_id, st, _types(st.last))

    # ---- inside ------------------------------------------------------------------------

    def _started_before(self, aid: int, rec: JobRecord) -> bool:
        """A task of the array started before ``rec`` (a restarted controller)."""
        jobs, started = self.ctl.jobs, rec.start_time or 0.0
        return any((r := jobs.get(t)) is not None and r.start_time is not None
                   and r.start_time < started for t in self.ctl.arrays.get(aid) or ())

    def _unfinished(self, aid: int) -> int:
        jobs = self.ctl.jobs
        n = sum(1 for t in self.ctl.arrays.get(aid) or ()
                if (r := jobs.get(t)) is not None and not r.state.is_finished)
        tail = self.ctl.tails.get(aid)
        if tail is not None and tail.state is JobState.PENDING:
            n += tail.remaining
        return n

    def _read_stored(self, aid: int, st: _Ended) -> None:
        """Merge the stored ends of the array's tasks into ``st`` (those before a restart;
        the ones seen since are in both, which min, max and a set do not mind)."""
        st.reading = True
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(None, self.ctl.store.array_ended, aid)

        def done(f: asyncio.Future[list[tuple[str, int, int]]]) -> None:
            st.reading = False
            exc = None if f.cancelled() else f.exception()
            if f.cancelled() or exc is not None:
                log.warning("array %d: its stored task ends could not be read (%s); its "
                            "summary mail covers the tasks seen by this controller", aid,
                            exc or "cancelled")
            else:
                from corral.controller.mail import _FAILED

                failed = {s.value for s in _FAILED}
                for state, lo, hi in f.result():
                    st.states.add(state)
                    st.failed = st.failed or state in failed
                    st.exit_min = lo if st.exit_min is None else min(st.exit_min, lo)
                    st.exit_max = hi if st.exit_max is None else max(st.exit_max, hi)
            if self.ended.get(aid) is st and st.last is not None:
                from corral.controller.mail import _types

                self._maybe_done(aid, st, _types(st.last))
        fut.add_done_callback(done)

    @staticmethod
    def _note(st: _Ended, rec: JobRecord) -> None:
        code = rec.exit_code or 0
        st.exit_min = code if st.exit_min is None else min(st.exit_min, code)
        st.exit_max = code if st.exit_max is None else max(st.exit_max, code)
        from corral.controller.mail import _FAILED

        st.failed = st.failed or rec.state in _FAILED
        st.states.add(rec.state.value)
        st.last = rec

    def _maybe_done(self, aid: int, st: _Ended, kinds: set[str]) -> None:
        if st.left > 0 or st.last is None or st.reading:
            return
        del self.ended[aid]
        self.begun.discard(aid)
        if st.failed and "FAIL" in kinds:
            event, word = "FAIL", "Failed"
        elif "END" in kinds:
            event, word = "END", "Ended"
        else:
            return
        lo, hi = st.exit_min or 0, st.exit_max or 0
        state = "Mixed" if lo == 0 and hi > 0 else (
            next(iter(st.states)) if len(st.states) == 1 else st.last.state.value)
        self._send(st.last, event, word, f", {state}, ExitCode [{lo}-{hi}]",
                   {"SLURM_JOB_STATE": state, "SLURM_JOB_EXIT_CODE_MIN": str(lo),
                    "SLURM_JOB_EXIT_CODE_MAX": str(hi)})

    def _send(self, rec: JobRecord, event: str, word: str, tail: str,
              extra: dict[str, str] | None = None) -> None:
        from corral.controller.mail import compose, deliver

        aid = rec.array_job_id
        _, env = compose(self.ctl, rec, event, word)
        subject = f"Slurm Array Summary Job_id={aid}_* ({aid}) Name={rec.sub.spec.name} " \
                  f"{word}{tail}"
        env.update({"SLURM_JOB_ID": str(aid), "SLURM_ARRAY_JOB_ID": str(aid),
                    "SLURM_ARRAY_TASK_COUNT": str(rec.array_task_count)})
        env.pop("SLURM_ARRAY_TASK_ID", None)
        env.pop("SLURM_JOB_RUN_TIME", None)
        env.update(extra or {})
        deliver(self.ctl, rec, event, subject, env, key=f"a{aid}.{event}")
