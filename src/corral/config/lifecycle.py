"""``[scripts]`` and ``[health_check]`` of ``corral.toml``: the node lifecycle programs.

``[scripts]`` holds Slurm's prolog and epilog programs (slurm.conf ``Prolog``, ``Epilog``,
``TaskProlog``, ``TaskEpilog``, ``PrologSlurmctld``, ``EpilogSlurmctld``,
``PrologEpilogTimeout``, ``PrologFlags``); ``[health_check]`` the node health check
(``HealthCheckProgram``, ``HealthCheckInterval``, ``HealthCheckNodeState``); ``[mail]``
the SMTP server job mail goes through (instead of ``[scripts] mail_prog``). Paths are
absolute paths on the machine that runs the program (each node, or the controller's host
for the ``*_slurmctld`` ones). Semantics in ``docs/lifecycle.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

#: PrologFlags Corral understands. Alloc and Contain describe what Corral always does
#: (the prolog runs on every node of the allocation when the job starts; every job's
#: processes are in its cgroup); NoHold is Slurm's SchedulerParameters
#: nohold_on_prolog_fail (a job whose prolog failed is requeued without a hold).
PROLOG_FLAGS = ("alloc", "contain", "nohold")

#: HealthCheckNodeState values: the node states in which the check runs.
HEALTH_NODE_STATES = ("any", "idle", "alloc", "mixed", "nondrained_idle", "cycle")


@dataclass(frozen=True, slots=True)
class ScriptsConfig:
    """The prolog and epilog programs; "" means none."""

    prolog: str = ""  # as root on each allocated node before the job starts there
    epilog: str = ""  # as root on each allocated node after the job ended there
    task_prolog: str = ""  # as the job's user before its batch script (export/unset/print)
    task_epilog: str = ""  # as the job's user after its batch script ended
    prolog_slurmctld: str = ""  # on the controller's host when the job is allocated
    epilog_slurmctld: str = ""  # on the controller's host when the job ended
    timeout_s: int = 0  # PrologEpilogTimeout: a program running longer is killed (0: none)
    flags: tuple[str, ...] = ()  # PrologFlags (alloc, contain, nohold)
    # MailProg: run on the controller's host as `PROG -s SUBJECT USER` for --mail-type
    # events ("" and no [mail] smtp_host: no mail is sent); MailDomain: appended to a
    # --mail-user without "@"
    mail_prog: str = ""
    mail_domain: str = ""

    def launch_fields(self) -> dict[str, object]:
        """The ``LaunchRequest`` fields these settings give every launch."""
        return {"prolog": self.prolog, "epilog": self.epilog,
                "task_prolog": self.task_prolog, "task_epilog": self.task_epilog,
                "script_timeout_s": self.timeout_s}

    @property
    def hold_on_prolog_failure(self) -> bool:
        return "nohold" not in self.flags


@dataclass(frozen=True, slots=True)
class HealthCheckConfig:
    """The node health check: ``program`` runs as root on every node each ``interval_s``
    (and when its agent registers) while the node is in one of ``node_state``; a check
    that fails drains the node with its message, one that passes returns a node the
    check had drained."""

    program: str = ""  # "" : no health check
    interval_s: int = 0  # 0: only when the agent registers
    node_state: tuple[str, ...] = ("any",)
    timeout_s: int = 60  # a check running longer fails (and is killed)


@dataclass(frozen=True, slots=True)
class MailConfig:
    """Job mail (``--mail-type``) sent by the controller itself to an SMTP server
    (``corral.controller.smtpmail``); ``smtp_host = ""``: none (``[scripts] mail_prog``, if
    set, sends it instead). The retry settings apply to both (``corral.controller.outbox``)."""

    smtp_host: str = ""
    smtp_port: int = 25
    from_address: str = ""  # "": corral@<the controller's host name>
    starttls: bool = False  # upgrade the connection with STARTTLS (the server verified)
    ca_file: str = ""  # CA certificates to verify the server with ("": the system's)
    username: str = ""  # log in (AUTH) as this user; needs starttls
    password_file: str = ""  # the password, first line of this file (keep it 0600)
    timeout_s: float = 30.0  # each connection's socket timeout
    max_queued: int = 1000  # mails owed at once (the outbox); more are dropped (logged)
    retry_s: float = 60.0  # first retry this long after a failed attempt, then doubled
    retry_max_s: float = 3600.0  # ... up to this long between attempts
    max_attempts: int = 8  # attempts per mail; then it is dropped (logged as an error)


def check_mail(scripts: ScriptsConfig, mail: MailConfig) -> list[tuple[str, str]]:
    """Problems of ``[mail]`` as (key, message)."""
    out: list[tuple[str, str]] = []
    if mail.retry_s <= 0:
        out.append(("mail.retry_s", "must be more than 0"))
    if mail.retry_max_s < mail.retry_s:
        out.append(("mail.retry_max_s", f"must be at least retry_s ({mail.retry_s:g})"))
    if mail.max_attempts < 1:
        out.append(("mail.max_attempts", "must be 1 or more"))
    if mail.max_queued < 1:
        out.append(("mail.max_queued", "must be 1 or more"))
    if not mail.smtp_host:
        return out
    if scripts.mail_prog:
        out.append(("mail.smtp_host", "set either [mail] smtp_host or [scripts] mail_prog, "
                    "not both (each would send every mail)"))
    if not 0 < mail.smtp_port < 65536:
        out.append(("mail.smtp_port", f"must be 1-65535, got {mail.smtp_port}"))
    if mail.timeout_s <= 0:
        out.append(("mail.timeout_s", "must be more than 0"))
    if mail.username and not mail.starttls:
        out.append(("mail.username", "logging in sends the password: set starttls = true"))
    if mail.username and not mail.password_file:
        out.append(("mail.password_file", "a username needs a password_file"))
    for key in ("password_file", "ca_file"):
        path = getattr(mail, key)
        if path and not path.startswith("/"):
            out.append((f"mail.{key}", f"must be an absolute path, not {path!r}"))
    if mail.from_address and ("@" not in mail.from_address
                              or any(c in mail.from_address for c in " \r\n<>,")):
        out.append(("mail.from_address", f"not a plain address: {mail.from_address!r}"))
    return out


def check_lifecycle(scripts: ScriptsConfig, health: HealthCheckConfig) -> list[tuple[str, str]]:
    """Problems as (key, message): relative paths, unknown flags and states."""
    out: list[tuple[str, str]] = []
    for name in ("prolog", "epilog", "task_prolog", "task_epilog", "prolog_slurmctld",
                 "epilog_slurmctld", "mail_prog"):
        path = getattr(scripts, name)
        if path and not path.startswith("/"):
            out.append((f"scripts.{name}", f"must be an absolute path, not {path!r}"))
    for flag in scripts.flags:
        if flag.lower() not in PROLOG_FLAGS:
            out.append(("scripts.flags", f"unknown flag {flag!r} (known: "
                        f"{', '.join(PROLOG_FLAGS)})"))
    if health.program and not health.program.startswith("/"):
        out.append(("health_check.program", f"must be an absolute path, not "
                    f"{health.program!r}"))
    for state in health.node_state:
        if state.lower() not in HEALTH_NODE_STATES:
            out.append(("health_check.node_state", f"unknown state {state!r} (known: "
                        f"{', '.join(HEALTH_NODE_STATES)})"))
    if health.timeout_s <= 0:
        out.append(("health_check.timeout_s", "must be more than 0"))
    return out
