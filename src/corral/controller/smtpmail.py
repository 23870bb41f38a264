"""Job mail over SMTP (``[mail] smtp_host``): the message and one delivery attempt.

``corral.controller.mail`` decides whether a job event mails and what the subject says;
``corral.controller.outbox`` stores the mail, runs the attempts off the event loop and
retries. This module builds the message and makes one attempt when the controller itself
talks to an SMTP server instead of running ``[scripts] mail_prog``. Policy:

- each attempt opens its own connection with ``[mail] timeout_s`` on the socket,
  upgrades it with STARTTLS when ``starttls`` is set (the server's certificate is
  verified, against ``ca_file`` when given) and logs in when ``username`` is set (the
  password is the first line of ``password_file``, read at each attempt);
- ``permanent(exc)`` tells a failure not worth retrying (the server answered 5xx to the
  sender, the recipient or the data) from one that is (refused connection, timeout, 4xx
  answers, a failed login or certificate check, which a fixed ``[mail]`` and ``corral
  config reload`` cure).

The message: ``From`` (``from_address``, default ``corral@<this host>``), ``To``,
``Subject`` (Slurm's subject line), ``Date`` (when the event happened), ``Message-ID``
(made from the mail's dedup key, so a mail sent twice across a controller crash carries
the same id both times), ``Auto-Submitted: auto-generated`` (RFC 3834: no vacation
replies), ``X-Corral-Job-Id`` and ``X-Corral-Mail-Type`` (``BEGIN``, ``END``, ``FAIL``,
``REQUEUE``, ``TIME_LIMIT``, ``TIME_LIMIT_90``, ...); the body lists the job's facts, one
``Key: value`` per line.
"""

from __future__ import annotations

import hashlib
import logging
import smtplib
import socket
import ssl
from email.message import EmailMessage
from email.policy import SMTP as SMTP_POLICY
from email.utils import formatdate, make_msgid
from pathlib import Path

from corral.config.lifecycle import MailConfig

log = logging.getLogger("corral.mail")

#: Headers as long as RFC 5322 allows before folding: a subject stays on one line.
_POLICY = SMTP_POLICY.clone(max_line_length=998)


def build_message(cfg: MailConfig, to: str, subject: str, facts: dict[str, str],
                  job_id: int, mail_type: str, *, key: str = "",
                  when: float | None = None) -> EmailMessage:
    """The mail for one recipient (``facts``: shown in the body, in order; ``key``: the
    outbox's dedup key, the Message-ID's local part; ``when``: the Date)."""
    msg = EmailMessage(policy=_POLICY)
    sender = cfg.from_address or f"corral@{socket.gethostname()}"
    domain = sender.rpartition("@")[2] or socket.gethostname()
    msg["From"] = sender
    msg["To"] = to
    msg["Subject"] = subject
    msg["Date"] = formatdate(when, localtime=True)
    if key:
        digest = hashlib.sha256(key.encode()).hexdigest()[:24]
        msg["Message-ID"] = f"<corral.{job_id}.{digest}@{domain}>"
    else:
        msg["Message-ID"] = make_msgid("corral", domain=domain)
    msg["Auto-Submitted"] = "auto-generated"
    msg["X-Corral-Job-Id"] = str(job_id)
    msg["X-Corral-Mail-Type"] = mail_type
    body = "".join(f"{k}: {value}\n" for k, value in facts.items() if value != "")
    msg.set_content(f"{subject}\n\n{body}")
    return msg


def deliver(cfg: MailConfig, msg: EmailMessage) -> None:
    """Send ``msg`` now (blocking: the outbox runs it in a thread of its own). Raises on
    failure (``OSError``, ``smtplib.SMTPException``; ``ValueError``/``IndexError`` for an
    unreadable password file)."""
    with smtplib.SMTP(cfg.smtp_host, cfg.smtp_port, timeout=cfg.timeout_s) as smtp:
        if cfg.starttls:
            ctx = ssl.create_default_context(cafile=cfg.ca_file or None)
            smtp.starttls(context=ctx)
        if cfg.username:
            lines = Path(cfg.password_file).read_text().splitlines()
            smtp.login(cfg.username, lines[0] if lines else "")
        smtp.send_message(msg)


def permanent(exc: BaseException) -> bool:
    """The server refused this mail for good (5xx to MAIL, RCPT or DATA): no retry. A
    failed login (also 5xx) is a configuration problem and is retried."""
    if isinstance(exc, smtplib.SMTPAuthenticationError):
        return False
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        codes = [code for code, _ in exc.recipients.values()]
        return bool(codes) and all(500 <= code < 600 for code in codes)
    if isinstance(exc, smtplib.SMTPResponseException):
        return 500 <= exc.smtp_code < 600
    return False
