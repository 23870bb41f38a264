"""``--mail-type=TIME_LIMIT_50|TIME_LIMIT_80|TIME_LIMIT_90``: mail when a running job has
used that share of its time limit (``TIME_LIMIT``, the limit itself, is mailed when the
job ends TIMEOUT: ``corral.controller.mail.job_event``).

Policy: a job is watched from its start (only jobs that asked for one of these types);
the controller's tick compares each watched job's run time (suspensions not counted)
with its time limit and mails the highest requested share it has newly passed, once per
run (a requeued job's next run is watched afresh). Shares passed together (the tick
missed one, or the controller was down) give one mail, for the highest. The watch list
lives in memory: after a controller restart the running jobs are looked over once; a
share already mailed before the restart is owed again under the same key (job, run,
type) and the outbox (``corral.controller.outbox``) does not send it twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral.core.model.job import JobState

if TYPE_CHECKING:
    from corral.controller.records import JobRecord
    from corral.controller.service import Controller

#: (percent of the time limit, mail type), highest first.
SHARES = ((90, "TIME_LIMIT_90"), (80, "TIME_LIMIT_80"), (50, "TIME_LIMIT_50"))


def wants(kinds: set[str]) -> bool:
    return any(kind in kinds for _, kind in SHARES)


class TimeLimitMail:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.watched: dict[int, tuple[int, int]] = {}  # job id -> (its run, share mailed)
        self._scanned = False

    def watch(self, rec: JobRecord) -> None:
        """``rec`` started and asked for a time-limit mail."""
        self.watched[rec.id] = (rec.restarts, 0)

    def tick(self, now: float) -> None:
        ctl = self.ctl
        if not (ctl.cfg.scripts.mail_prog or ctl.cfg.mail.smtp_host):
            return
        from corral.controller.mail import WORDS, _types, run_time_s, send_mail

        if not self._scanned:  # a restarted controller: its running jobs, once
            self._scanned = True
            for started in ctl.running.values():
                if started.id not in self.watched and wants(_types(started)):
                    self.watch(started)
        for job_id, (run, mailed) in list(self.watched.items()):
            rec = ctl.running.get(job_id)
            if rec is None or rec.restarts != run:
                del self.watched[job_id]
                continue
            if rec.state is not JobState.RUNNING or not rec.time_limit_s:
                continue
            kinds = _types(rec)
            if "NONE" in kinds or (rec.array_task_id is not None
                                   and "ARRAY_TASKS" not in kinds):
                del self.watched[job_id]
                continue
            share = 100.0 * run_time_s(rec, now) / rec.time_limit_s
            for pct, kind in SHARES:
                if kind in kinds and mailed < pct <= share:
                    self.watched[job_id] = (run, pct)
                    send_mail(ctl, rec, kind, WORDS[kind])
                    break
