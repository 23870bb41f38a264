"""Fair-share usage ledger: decayed CPU-seconds per association, kept across restarts.

Algorithm: the ledger holds usage decayed to ``as_of``. A finished job is charged its
whole run, decayed to the moment it ended (``corral.core.priority.decay``: the exact
integral of CPUs x 2^(-age/half-life)). For a snapshot the ledger is decayed to ``now``
and every running job adds its run so far (not stored: it is charged in full when it
ends). The ledger is saved in the store's ``meta`` table on every tick, so a controller
restart keeps the fair-share history (a crash loses at most one tick of charges).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from corral.controller.records import JobRecord
from corral.core.model.account import AccountTree
from corral.core.priority.decay import association_of, charge_cpu_seconds, decay_all

META_KEY = "fairshare_usage"


class UsageLedger:
    def __init__(self, tree: AccountTree, half_life_s: float) -> None:
        self.tree = tree
        self.half_life_s = half_life_s
        self.usage: dict[tuple[str, str], float] = {}
        self.as_of = 0.0
        self.dirty = False

    def _advance(self, now: float) -> None:
        if now > self.as_of:
            if self.usage:
                self.usage = decay_all(self.usage, now - self.as_of, self.half_life_s)
            self.as_of = now

    def charge(self, rec: JobRecord, now: float) -> None:
        """Charge a job that just ended (its whole run)."""
        if rec.start_time is None or rec.allocation is None:
            return
        self._advance(now)
        end = rec.end_time if rec.end_time is not None else now
        # time spent SUSPENDED is not charged (counted as if at the start of the run)
        start = min(rec.start_time + rec.suspended_s, end)
        amount = charge_cpu_seconds(rec.allocation.cpus, start, end, now, self.half_life_s)
        if amount > 0:
            key = association_of(rec.sub.spec, self.tree)
            self.usage[key] = self.usage.get(key, 0.0) + amount
            self.dirty = True

    def view(self, now: float, running: Iterable[JobRecord]) -> dict[tuple[str, str], float]:
        """Usage decayed to ``now`` including what running jobs used so far."""
        self._advance(now)
        out = dict(self.usage)
        for rec in running:
            if rec.start_time is None or rec.allocation is None:
                continue
            start = min(rec.start_time + rec.suspended_s, now)
            amount = charge_cpu_seconds(rec.allocation.cpus, start, now, now,
                                        self.half_life_s)
            if amount > 0:
                key = association_of(rec.sub.spec, self.tree)
                out[key] = out.get(key, 0.0) + amount
        return out

    def to_json(self) -> str:
        return json.dumps({"as_of": self.as_of,
                           "usage": [[a, u, v] for (a, u), v in sorted(self.usage.items())]})

    def load_json(self, text: str) -> None:
        data: dict[str, Any] = json.loads(text)
        self.as_of = float(data.get("as_of", 0.0))
        self.usage = {(str(a), str(u)): float(v) for a, u, v in data.get("usage", ())}
