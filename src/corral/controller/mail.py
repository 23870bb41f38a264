"""Mail about jobs (``--mail-type``, ``--mail-user``) through ``[scripts] mail_prog`` or
the SMTP server of ``[mail] smtp_host`` (``corral.controller.smtpmail``: the same subject,
the facts below in the body).

As Slurm 22.05's slurmctld: the program runs on the controller's host as ``PROG -s
SUBJECT USER`` (stdin empty, the job's facts in the environment), for

- ``BEGIN``: the job started (``Slurm Job_id=12 Name=x Began, Queued time 00:00:03``);
- its end: a job that failed (FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, PREEMPTED,
  DEADLINE, BOOT_FAIL) mails ``Failed`` with ``FAIL``, else ``Ended`` with ``END``; a job
  that completed or was cancelled mails ``Ended`` with ``END`` (``Slurm Job_id=12 Name=x
  Ended, Run time 00:01:40, COMPLETED, ExitCode 0``);
- ``REQUEUE``: the job was requeued (``Requeued, Run time ...``);
- ``TIME_LIMIT``: the job ended TIMEOUT (``Reached time limit, Run time ...``); while it
  runs, ``TIME_LIMIT_50|80|90`` (``Reached 90% of time limit``:
  ``corral.controller.mail_limits``).

- ``INVALID_DEPEND``: a pending job's dependency can never be satisfied (its reason
  became ``DependencyNeverSatisfied``; ``Invalid dependency``, no time).

``ALL`` is BEGIN, END, FAIL, REQUEUE, INVALID_DEPEND (and STAGE_OUT: never sent here);
``NONE`` none. ``USER`` is ``--mail-user`` (default the job's user), with ``[scripts]
mail_domain`` appended when it has no ``@``; one that is not a plain address is refused at
submit (it becomes an argument of the program). An array's tasks mail one by one only
with ``ARRAY_TASKS``; otherwise the array mails once (``corral.controller.mail_arrays``).
Environment: ``SLURM_JOB_ID``,
``SLURM_JOB_NAME``, ``SLURM_JOB_USER``, ``SLURM_JOB_MAIL_TYPE``, ``SLURM_JOB_STATE``,
``SLURM_JOB_EXIT_CODE_MAX``, ``SLURM_JOB_QUEUED_TIME``, ``SLURM_JOB_RUN_TIME``,
``SLURM_JOB_WORK_DIR``, ``SLURM_JOB_STD_OUT``, ``SLURM_JOB_STD_ERR``, ``SLURM_CLUSTER_NAME``,
``SLURM_ARRAY_JOB_ID``/``SLURM_ARRAY_TASK_ID``. Every mail goes through the outbox
(``corral.controller.outbox``: stored, deduplicated by job, run, type and recipient, sent
after a restart when still owed, failures retried with backoff, then logged and dropped).
"""

from __future__ import annotations

import logging
import re
import time
from typing import TYPE_CHECKING

from corral.controller.errors import ApiError
from corral.controller.records import JobRecord
from corral.core.model.job import JobState
from corral.core.parse.timefmt import format_time_s

if TYPE_CHECKING:
    from corral.controller.service import Controller
    from corral.submission import JobSubmission

log = logging.getLogger("corral.mail")

_ADDRESS = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._%+=-]*(@[A-Za-z0-9.-]+)?$")
_ALL = {"BEGIN", "END", "FAIL", "REQUEUE", "INVALID_DEPEND"}
_FAILED = {JobState.FAILED, JobState.TIMEOUT, JobState.NODE_FAIL, JobState.OUT_OF_MEMORY,
           JobState.PREEMPTED, JobState.DEADLINE, JobState.BOOT_FAIL}


def check_submit(sub: JobSubmission) -> None:
    """A ``--mail-user`` must be a plain address (user or user@host), at most 256 chars."""
    for addr in (sub.extra.get("mail_user") or "").split(","):
        if addr and (len(addr) > 256 or not _ADDRESS.match(addr)):
            raise ApiError("invalid", f"invalid --mail-user {addr!r}",
                           slurm="Invalid --mail-user specification")


def _types(rec: JobRecord) -> set[str]:
    kinds = {k for k in (rec.sub.extra.get("mail_type") or "").split(",") if k}
    if "ALL" in kinds:
        kinds |= _ALL
    return kinds


def job_event(ctl: Controller, rec: JobRecord, event: str,
              run_s: float | None = None) -> None:
    """``event``: ``BEGIN``, ``END`` (any end; FAIL decided here) or ``REQUEUE``
    (``run_s``: how long the run that was requeued ran)."""
    if not (ctl.cfg.scripts.mail_prog or ctl.cfg.mail.smtp_host):
        return
    kinds = _types(rec)
    if not kinds or "NONE" in kinds:
        return
    if rec.array_task_id is not None and "ARRAY_TASKS" not in kinds:
        if event in ("BEGIN", "END"):  # one mail for the whole array
            ctl.mail_arrays.task_event(rec, event, kinds)
        return
    if event == "BEGIN":
        from corral.controller.mail_limits import wants

        if wants(kinds):
            ctl.mail_limits.watch(rec)
    if event == "END":
        if rec.state is JobState.TIMEOUT and "TIME_LIMIT" in kinds:
            send_mail(ctl, rec, "TIME_LIMIT", WORDS["TIME_LIMIT"], run_s)
        failed = rec.state in _FAILED
        if failed and "FAIL" in kinds:
            event = "FAIL"
        elif "END" not in kinds:
            return
    elif event not in kinds:
        return
    send_mail(ctl, rec, event, WORDS[event], run_s)


#: Slurm's word for each mail type in the subject.
WORDS = {"BEGIN": "Began", "END": "Ended", "FAIL": "Failed", "REQUEUE": "Requeued",
         "INVALID_DEPEND": "Invalid dependency",
         "TIME_LIMIT": "Reached time limit", "TIME_LIMIT_90": "Reached 90% of time limit",
         "TIME_LIMIT_80": "Reached 80% of time limit",
         "TIME_LIMIT_50": "Reached 50% of time limit"}


def run_time_s(rec: JobRecord, now: float) -> float:
    """How long this run has run, its suspensions not counted."""
    if rec.start_time is None:
        return 0.0
    used = (rec.end_time if rec.end_time is not None else now) - rec.start_time
    used -= rec.suspended_s + (now - rec.suspended_at if rec.suspended_at is not None
                               else 0.0)
    return max(0.0, used)


def send_mail(ctl: Controller, rec: JobRecord, event: str, word: str,
              run_s: float | None = None) -> None:
    """Mail ``event`` (a key of ``WORDS``, decided by the caller) to the job's users."""
    subject, env = compose(ctl, rec, event, word, run_s)
    deliver(ctl, rec, event, subject, env)


def compose(ctl: Controller, rec: JobRecord, event: str, word: str,
            run_s: float | None = None) -> tuple[str, dict[str, str]]:
    """The subject and the facts (``SLURM_*``) of the mail for ``event``."""
    now = time.time()
    queued = (rec.start_time or now) - float(rec.submit_time or now)
    run = run_time_s(rec, now) if run_s is None else run_s
    if event == "BEGIN":
        when = f", Queued time {format_time_s(max(0.0, queued))}"
    elif event == "INVALID_DEPEND":
        when = ""  # as Slurm: a job that never ran has no time to tell
    else:
        when = f", Run time {format_time_s(max(0.0, run))}"
    subject = f"Slurm Job_id={rec.display_id} Name={rec.sub.spec.name} {word}{when}"
    if rec.array_task_id is not None:
        subject = (f"Slurm Array Task Job_id={rec.array_job_id}_{rec.array_task_id} "
                   f"({rec.id}) Name={rec.sub.spec.name} {word}{when}")
    if event in ("END", "FAIL"):
        subject += f", {rec.state.value}, ExitCode {rec.exit_code or 0}"
    env = {
        "SLURM_JOB_ID": str(rec.id), "SLURM_JOB_NAME": rec.sub.spec.name,
        "SLURM_JOB_USER": rec.sub.spec.user, "SLURM_JOB_MAIL_TYPE": word,
        "SLURM_JOB_STATE": rec.state.value, "SLURM_JOB_EXIT_CODE_MAX": str(rec.exit_code or 0),
        "SLURM_JOB_QUEUED_TIME": format_time_s(max(0.0, queued)),
        "SLURM_JOB_RUN_TIME": format_time_s(max(0.0, run)),
        "SLURM_JOB_WORK_DIR": rec.sub.workdir, "SLURM_JOB_STD_OUT": rec.stdout or "",
        "SLURM_JOB_STD_ERR": rec.stderr or "", "SLURM_CLUSTER_NAME": ctl.cfg.cluster_name,
    }
    if rec.array_job_id is not None and rec.array_task_id is not None:
        env["SLURM_ARRAY_JOB_ID"] = str(rec.array_job_id)
        env["SLURM_ARRAY_TASK_ID"] = str(rec.array_task_id)
    return subject, env


def mail_key(rec: JobRecord, event: str) -> str:
    """The dedup key of a job's mail (``corral.controller.outbox``): job, run, type."""
    return f"{rec.id}.{rec.restarts}.{event}"


def deliver(ctl: Controller, rec: JobRecord, event: str, subject: str,
            env: dict[str, str], key: str = "") -> None:
    """Owe the mail to each of the job's users (``corral.controller.outbox`` stores and
    sends it, by SMTP or the mail program); ``key``: its dedup key less the recipient
    (default ``mail_key``)."""
    from corral.controller.outbox import Mail

    users = [u for u in (rec.sub.extra.get("mail_user") or rec.sub.spec.user).split(",")
             if u]
    domain = ctl.cfg.scripts.mail_domain
    key = key or mail_key(rec, event)
    now = time.time()
    header_id = int(env.get("SLURM_JOB_ID") or rec.id)  # an array's summary: the array's id
    for user in users:
        if not _ADDRESS.match(user):
            log.warning("job %d: not mailing %r (not a plain address)", rec.id, user)
            continue
        to = user if "@" in user or not domain else f"{user}@{domain}"
        ctl.outbox.add(Mail(key=f"{key}:{to}", job_id=rec.id, created=now, to=to,
                            subject=subject, event=event, env=dict(env),
                            header_job_id=header_id))


def facts_of(env: dict[str, str]) -> dict[str, str]:
    """The mail body's facts: ``env`` (``SLURM_*``) under their body names, in order."""
    return {_FACTS.get(k, k): v for k, v in env.items()}


#: The body's names of the facts the program gets in its environment.
_FACTS = {
    "SLURM_JOB_ID": "Job ID", "SLURM_JOB_NAME": "Name", "SLURM_JOB_USER": "User",
    "SLURM_JOB_MAIL_TYPE": "Event", "SLURM_JOB_STATE": "State",
    "SLURM_JOB_EXIT_CODE_MAX": "Exit code", "SLURM_JOB_QUEUED_TIME": "Queued time",
    "SLURM_JOB_RUN_TIME": "Run time", "SLURM_JOB_WORK_DIR": "Work dir",
    "SLURM_JOB_STD_OUT": "Stdout", "SLURM_JOB_STD_ERR": "Stderr",
    "SLURM_CLUSTER_NAME": "Cluster", "SLURM_ARRAY_JOB_ID": "Array job ID",
    "SLURM_ARRAY_TASK_ID": "Array task ID", "SLURM_JOB_EXIT_CODE_MIN": "Lowest exit code",
    "SLURM_ARRAY_TASK_COUNT": "Array tasks",
}
