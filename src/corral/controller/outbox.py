"""The job mail outbox: every mail a job owes, stored until it is sent or given up.

``corral.controller.mail`` decides which mails a job event owes; this module makes sure
each is delivered once a controller crash is over, and retried while the SMTP server (or
``[scripts] mail_prog``) fails. Policy:

- **Stored with the change that owes it.** ``add`` queues the mail's row (table
  ``mail_outbox``) to the store at once, before the caller persists the job change (a
  job's end, start, requeue), so both go in the same commit (SQLite: the same batch of
  the loop's turn; PostgreSQL: the writer thread's batch, else the mail's commit comes
  first). Nothing is sent before its row committed.
- **One key per mail**: ``<job>.<run>.<type>:<recipient>`` (an array's summary:
  ``a<array>.<type>:<recipient>``). A row whose key is stored already is not stored again
  and not sent again: a job change replayed after a ``kill -9`` (a job end the agent
  reports again to the restarted controller, a time-limit share passed again) owes
  nothing new.
- **Delivery is at least once.** At start, the controller loads the rows still owed
  and sends them. A mail is marked sent only after the server accepted it; a controller
  killed between the two sends it again after its restart, with the same Message-ID
  (``smtpmail.build_message``), so a mail client or MTA that drops duplicates by
  Message-ID drops it.
- **Retries with backoff.** A failed attempt is retried ``retry_s`` later, then twice
  that, ... up to ``retry_max_s`` between attempts; after ``max_attempts`` attempts the
  mail is dropped with an error log line naming the job, recipient, attempts and last
  error. An SMTP server's permanent refusal (5xx to the sender, recipient or data) drops
  it at once. Attempts and the next try time are stored, so the schedule survives a
  restart.
- **Never on the scheduling path.** An SMTP attempt runs in a daemon thread of its own
  (``smtplib`` blocks; a hung server never keeps the controller from exiting), a
  ``mail_prog`` run is a subprocess awaited on the loop; at most ``WORKERS`` attempts run
  at once. At most ``max_queued`` mails are owed at once; more are dropped, logged.
- Rows sent or dropped are kept ``KEEP_S`` (the dedup window) and then pruned.
"""

from __future__ import annotations

import asyncio
import json
import logging
import smtplib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from corral.controller.service import Controller

log = logging.getLogger("corral.mail")

WORKERS = 2  # attempts at once
KEEP_S = 30 * 86400.0  # sent and dropped rows are kept this long (dedup)


@dataclass(slots=True)
class Mail:
    """One owed mail (a row of ``mail_outbox``)."""

    key: str
    job_id: int
    created: float
    to: str
    subject: str
    event: str  # the mail type: BEGIN, END, FAIL, ...
    env: dict[str, str]  # the job's facts (SLURM_*), as mail_prog gets them
    header_job_id: int  # X-Corral-Job-Id (an array's summary: the array's id)
    attempts: int = 0
    next_try: float = 0.0

    def row(self) -> dict[str, Any]:
        return {"key": self.key, "job_id": self.job_id, "time": self.created,
                "state": "owed", "attempts": self.attempts, "next_try": self.next_try,
                "data": json.dumps({"to": self.to, "subject": self.subject,
                                    "event": self.event, "env": self.env,
                                    "header_job_id": self.header_job_id})}

    @classmethod
    def from_row(cls, row: Any) -> Mail:
        data = json.loads(row.data)
        return cls(key=str(row.key), job_id=int(row.job_id), created=float(row.time),
                   to=str(data["to"]), subject=str(data["subject"]),
                   event=str(data["event"]),
                   env={str(k): str(v) for k, v in dict(data["env"]).items()},
                   header_job_id=int(data.get("header_job_id") or row.job_id),
                   attempts=int(row.attempts), next_try=float(row.next_try))


class MailFailed(Exception):
    """One attempt failed; ``permanent``: not worth another."""

    def __init__(self, what: str, permanent: bool = False) -> None:
        super().__init__(what)
        self.permanent = permanent


class Outbox:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.owed: dict[str, Mail] = {}  # stored, not yet sent or dropped
        self._storing = 0  # rows queued to the store, not committed yet
        self._busy: set[str] = set()  # keys with an attempt running
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._pruned = 0.0
        self._stopped = False
        self.sent = 0
        self.dropped = 0

    # ---- owing --------------------------------------------------------------------------

    def add(self, mail: Mail) -> None:
        """Owe ``mail``: its row goes to the store now (in the batch of the job change
        the caller persists next); it is sent once that committed, unless its key was
        stored before."""
        cfg = self.ctl.cfg.mail
        if mail.key in self.owed:
            return
        if len(self.owed) + self._storing >= cfg.max_queued:
            self.dropped += 1
            log.warning("job %d: mail to %s dropped: %d mails already wait (max_queued)",
                        mail.job_id, mail.to, len(self.owed) + self._storing)
            return
        mail.next_try = mail.next_try or mail.created
        self._storing += 1
        fut = self.ctl.store.submit_async(self.ctl.store.op_insert_mail([mail.row()]))
        fut.add_done_callback(lambda f: self._stored(mail, f))

    def _stored(self, mail: Mail, fut: asyncio.Future[Any]) -> None:
        self._storing -= 1
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:  # the store failed: still try to send it, from memory only
            log.error("job %d: mail to %s could not be stored (%s); sending it without "
                      "a stored record", mail.job_id, mail.to, exc)
        elif mail.key not in fut.result():
            log.info("job %d: mail %s already stored; not sent again", mail.job_id,
                     mail.key)
            return
        self.owed[mail.key] = mail
        self.kick()

    def load(self, rows: list[Any]) -> None:
        """At start: the mails still owed (from the store)."""
        for row in rows:
            try:
                mail = Mail.from_row(row)
            except (ValueError, TypeError, KeyError) as exc:
                log.error("mail %s: unreadable stored record, dropped: %s", row.key, exc)
                continue
            self.owed[mail.key] = mail
        if self.owed:
            log.info("%d mails owed from before the restart", len(self.owed))

    # ---- sending ------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        self.kick(now)
        if now - self._pruned >= 3600:
            self._pruned = now
            self.ctl.store.submit(self.ctl.store.op_prune_mail(now - KEEP_S))

    def kick(self, now: float | None = None) -> None:
        """Start attempts for the mails that are due, up to ``WORKERS`` at once; wake up
        again when the next one is due."""
        if self._stopped or self.ctl.term_over.is_set():
            return
        now = time.time() if now is None else now
        loop = asyncio.get_running_loop()
        nxt: float | None = None
        for mail in sorted(self.owed.values(), key=lambda m: (m.next_try, m.key)):
            if mail.key in self._busy:
                continue
            if mail.next_try > now:
                nxt = mail.next_try if nxt is None else min(nxt, mail.next_try)
                continue
            if len(self._busy) >= WORKERS:
                break
            self._busy.add(mail.key)
            task = loop.create_task(self._attempt(mail), name=f"mail-{mail.job_id}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if nxt is not None:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_later(max(0.0, nxt - now), self.kick)

    def stop(self) -> None:
        """No more attempts (the controller stops); the owed rows stay for the next."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()

    async def _attempt(self, mail: Mail) -> None:
        store = self.ctl.store
        try:
            try:
                how = await self._send(mail)
            except MailFailed as exc:
                self._failed(mail, exc)
                return
            except Exception as exc:  # noqa: BLE001 - an attempt must never kill the loop
                log.exception("job %d: mail to %s failed", mail.job_id, mail.to)
                self._failed(mail, MailFailed(f"{exc.__class__.__name__}: {exc}"))
                return
            self.owed.pop(mail.key, None)
            self.sent += 1
            store.submit(store.op_update_mail(mail.key, "sent", mail.attempts + 1,
                                              time.time()))
            log.info("job %d: mailed %s%s: %s", mail.job_id, mail.to, how, mail.subject)
        finally:
            self._busy.discard(mail.key)
            self.kick()

    def _failed(self, mail: Mail, exc: MailFailed) -> None:
        cfg = self.ctl.cfg.mail
        mail.attempts += 1
        store = self.ctl.store
        if exc.permanent or mail.attempts >= cfg.max_attempts:
            self.owed.pop(mail.key, None)
            self.dropped += 1
            store.submit(store.op_update_mail(mail.key, "dropped", mail.attempts,
                                              time.time()))
            why = "refused for good" if exc.permanent else \
                f"dropped after {mail.attempts} attempts"
            log.error("job %d: mail %s to %s %s, not sent: %s", mail.job_id, mail.event,
                      mail.to, why, exc)
            return
        delay = min(cfg.retry_max_s, cfg.retry_s * 2 ** (mail.attempts - 1))
        mail.next_try = time.time() + delay
        store.submit(store.op_update_mail(mail.key, "owed", mail.attempts, mail.next_try))
        log.warning("job %d: mail %s to %s failed (attempt %d of %d), next in %.1f s: %s",
                    mail.job_id, mail.event, mail.to, mail.attempts, cfg.max_attempts,
                    delay, exc)

    async def _send(self, mail: Mail) -> str:
        """One attempt; raises ``MailFailed``. Returns how it went (for the log)."""
        cfg = self.ctl.cfg
        if cfg.mail.smtp_host:
            from corral.controller import smtpmail
            from corral.controller.mail import facts_of

            mcfg = cfg.mail
            msg = smtpmail.build_message(mcfg, mail.to, mail.subject, facts_of(mail.env),
                                         mail.header_job_id, mail.event, key=mail.key,
                                         when=mail.created)

            def attempt() -> None:
                try:
                    smtpmail.deliver(mcfg, msg)
                except (OSError, smtplib.SMTPException, ValueError, IndexError) as exc:
                    where = f"through {mcfg.smtp_host}:{mcfg.smtp_port}"
                    raise MailFailed(f"{where}: {exc or exc.__class__.__name__}",
                                     smtpmail.permanent(exc)) from None

            await in_thread(attempt, f"corral-smtp-{mail.job_id}")
            return ""
        if cfg.scripts.mail_prog:
            from corral.controller.jobscripts import run_program

            prog = cfg.scripts.mail_prog
            env = {**mail.env, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
            ok, what = await run_program(prog, env, 60, ("-s", mail.subject, mail.to))
            if not ok:
                raise MailFailed(f"{prog} -s ... {mail.to}: {what}")
            return f" (through {prog})"
        raise MailFailed("no mail_prog or [mail] smtp_host is configured any more",
                         permanent=True)


def in_thread(fn: Callable[[], None], name: str) -> asyncio.Future[None]:
    """Run ``fn`` in a daemon thread; the future resolves (on the calling loop) with
    its outcome."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    def done(exc: BaseException | None) -> None:
        if fut.done():
            return
        if exc is None:
            fut.set_result(None)
        else:
            fut.set_exception(exc)

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the loop
            err: BaseException | None = exc
        else:
            err = None
        try:
            loop.call_soon_threadsafe(done, err)
        except RuntimeError:  # the loop closed meanwhile (the controller stopped)
            pass

    threading.Thread(target=run, name=name, daemon=True).start()
    return fut
