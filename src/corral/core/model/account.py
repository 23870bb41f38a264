"""Accounts as a tree with shares, plus user associations (the leaves).

An ``Account`` names its parent (``None`` for children of the root). A user may belong to
several accounts; each membership is an ``Association`` with its own shares, exactly as
Slurm's association tree (``sacctmgr show assoc``). Fair-share walks this tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from corral.core.model.partition import QosLimits

ROOT_ACCOUNT = "root"


@dataclass(frozen=True, slots=True)
class Account:
    name: str
    parent: str | None = ROOT_ACCOUNT
    shares: int = 1
    limits: QosLimits = field(default_factory=QosLimits)  # GrpTRES/GrpJobs/MaxJobs of the account


@dataclass(frozen=True, slots=True)
class Association:
    user: str
    account: str
    shares: int = 1
    is_default: bool = False
    priority: int = 0  # association Priority (PriorityWeightAssoc factor)


@dataclass(frozen=True, slots=True)
class AccountTree:
    accounts: tuple[Account, ...] = ()
    associations: tuple[Association, ...] = ()

    def children(self, name: str) -> list[Account]:
        return [
            a
            for a in self.accounts
            if (a.parent or ROOT_ACCOUNT) == name and a.name != ROOT_ACCOUNT
        ]

    def users_of(self, account: str) -> list[Association]:
        return [a for a in self.associations if a.account == account]

    def account(self, name: str) -> Account | None:
        for a in self.accounts:
            if a.name == name:
                return a
        return None

    def ancestors(self, name: str) -> list[str]:
        """Account names from ``name`` up to (not including) the root."""
        out: list[str] = []
        seen: set[str] = set()
        cur: str | None = name
        while cur and cur != ROOT_ACCOUNT and cur not in seen:
            seen.add(cur)
            out.append(cur)
            acc = self.account(cur)
            cur = acc.parent if acc else None
        return out
