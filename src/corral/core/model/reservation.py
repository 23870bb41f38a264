"""Advance reservations (Slurm's ``scontrol create reservation``) as the core sees them."""

from __future__ import annotations

from dataclasses import dataclass

#: flags the scheduler acts on (the others are the shell's: DAILY/WEEKLY roll a
#: reservation forward, IGNORE_JOBS lets one be created over running jobs)
MAINT = "MAINT"
#: its jobs may start before it, end after it and use nodes outside it (``core.advance``)
FLEX = "FLEX"


@dataclass(frozen=True, slots=True)
class AdvanceReservation:
    """Nodes set aside over ``[start_time, end_time)``: only jobs that ask for the
    reservation by name (and whose user or account it allows) run there then, and no
    other job may hold those nodes at any moment of that window."""

    name: str
    start_time: float
    end_time: float
    nodes: tuple[str, ...]
    users: frozenset[str] | None = None  # None: not restricted by user
    accounts: frozenset[str] | None = None  # None: not restricted by account
    flags: frozenset[str] = frozenset()

    def active(self, now: float) -> bool:
        return self.start_time <= now < self.end_time

    def allows(self, user: str, account: str | None) -> bool:
        """Whether a job of ``user`` under ``account`` may use it (Users= or Accounts=
        list it; a reservation listing neither allows nobody, as Slurm requires one)."""
        if self.users is None and self.accounts is None:
            return False
        if self.users is not None and user in self.users:
            return True
        return self.accounts is not None and account is not None and account in self.accounts
