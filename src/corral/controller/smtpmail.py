"""Job mail over SMTP (``[mail] smtp_host``), sent off the controller's event loop.

``corral.controller.mail`` decides whether a job event mails and what the subject says;
this module delivers it when the controller itself talks to an SMTP server instead of
running ``[scripts] mail_prog``. Policy:

- the scheduling path only queues: ``send`` builds the message and hands it to a small
  pool of worker threads (``smtplib`` blocks), so a slow or dead SMTP server never
  stalls a scheduling cycle or an API request;
- each delivery opens its own connection with ``[mail] timeout_s`` on the socket,
  upgrades it with STARTTLS when ``starttls`` is set (the server's certificate is
  verified, against ``ca_file`` when given) and logs in when ``username`` is set (the
  password is the first line of ``password_file``, read at each delivery);
- a failure (refused connection, timeout, rejected recipient, bad login) is logged as a
  warning with the job and recipient and never touches the job; there are no retries;
- at most ``max_queued`` mails wait for the server at once; more are dropped, logged.

The message: ``From`` (``from_address``, default ``corral@<this host>``), ``To``,
``Subject`` (Slurm's subject line), ``Date``, ``Message-ID``, ``Auto-Submitted:
auto-generated`` (RFC 3834: no vacation replies), ``X-Corral-Job-Id`` and
``X-Corral-Mail-Type`` (``BEGIN``, ``END``, ``FAIL``, ``REQUEUE``, ``TIME_LIMIT``,
``TIME_LIMIT_90``, ...); the body lists the job's facts, one ``Key: value`` per line.
"""

from __future__ import annotations

import logging
import queue
import smtplib
import socket
import ssl
import threading
from email.message import EmailMessage
from email.policy import SMTP as SMTP_POLICY
from email.utils import formatdate, make_msgid
from pathlib import Path

from corral.config.lifecycle import MailConfig

log = logging.getLogger("corral.mail")

WORKERS = 2  # connections to the SMTP server at once

#: Headers as long as RFC 5322 allows before folding: a subject stays on one line.
_POLICY = SMTP_POLICY.clone(max_line_length=998)

_lock = threading.Lock()
_work: queue.SimpleQueue[tuple[MailConfig, EmailMessage, int]] = queue.SimpleQueue()
_threads: list[threading.Thread] = []
_queued = 0


def build_message(cfg: MailConfig, to: str, subject: str, facts: dict[str, str],
                  job_id: int, mail_type: str) -> EmailMessage:
    """The mail for one recipient (``facts``: shown in the body, in order)."""
    msg = EmailMessage(policy=_POLICY)
    sender = cfg.from_address or f"corral@{socket.gethostname()}"
    msg["From"] = sender
    msg["To"] = to
    msg["Subject"] = subject
    msg["Date"] = formatdate(localtime=True)
    msg["Message-ID"] = make_msgid("corral", domain=sender.rpartition("@")[2] or None)
    msg["Auto-Submitted"] = "auto-generated"
    msg["X-Corral-Job-Id"] = str(job_id)
    msg["X-Corral-Mail-Type"] = mail_type
    body = "".join(f"{key}: {value}\n" for key, value in facts.items() if value != "")
    msg.set_content(f"{subject}\n\n{body}")
    return msg


def deliver(cfg: MailConfig, msg: EmailMessage) -> None:
    """Send ``msg`` now (blocking; a worker thread calls this). Raises on failure."""
    with smtplib.SMTP(cfg.smtp_host, cfg.smtp_port, timeout=cfg.timeout_s) as smtp:
        if cfg.starttls:
            ctx = ssl.create_default_context(cafile=cfg.ca_file or None)
            smtp.starttls(context=ctx)
        if cfg.username:
            lines = Path(cfg.password_file).read_text().splitlines()
            smtp.login(cfg.username, lines[0] if lines else "")
        smtp.send_message(msg)


def _deliver_one(cfg: MailConfig, msg: EmailMessage, job_id: int) -> None:
    global _queued
    try:
        deliver(cfg, msg)
        log.info("job %d: mailed %s: %s", job_id, msg["To"], msg["Subject"])
    except (OSError, smtplib.SMTPException, ValueError, IndexError) as exc:
        log.warning("job %d: mail to %s through %s:%d failed: %s", job_id, msg["To"],
                    cfg.smtp_host, cfg.smtp_port, exc or exc.__class__.__name__)
    except Exception:  # a worker must survive whatever one mail does
        log.exception("job %d: mail to %s failed", job_id, msg["To"])
    finally:
        with _lock:
            _queued -= 1


def _worker() -> None:
    while True:
        _deliver_one(*_work.get())


def send(cfg: MailConfig, msg: EmailMessage, job_id: int) -> bool:
    """Queue ``msg`` for delivery; False (logged) when ``max_queued`` already wait."""
    global _queued
    with _lock:
        if _queued >= cfg.max_queued:
            log.warning("job %d: mail to %s dropped: %d mails already wait for %s",
                        job_id, msg["To"], _queued, cfg.smtp_host)
            return False
        _queued += 1
        while len(_threads) < WORKERS:  # daemons: a stuck server never blocks an exit
            t = threading.Thread(target=_worker, name=f"corral-smtp-{len(_threads)}",
                                 daemon=True)
            t.start()
            _threads.append(t)
    _work.put((cfg, msg, job_id))
    return True


def queued() -> int:
    """Mails handed to the workers and not yet delivered or failed."""
    with _lock:
        return _queued
