"""A standby's warm copy of the leader's state, so that a takeover does not start cold.

While a controller stands by (``roles.serve_seats``), ``WarmState.run`` refreshes, every
``[controller] standby_refresh_s``, its own copy of what a new leader needs from the
database: the active jobs, parsed into ``JobRecord`` objects, and the idempotency keys of
the last ``submitkeys.TTL_S``. At takeover ``catch_up`` brings the copy up to date one
last time, after the fencing epoch was bumped (so the old leader can commit nothing
more), and ``Controller.start`` takes the records from it instead of loading and
parsing every active job again.

Algorithm (PostgreSQL; a SQLite controller has no standby):

1. **Which rows changed.** Every row version in PostgreSQL carries ``xmin``, the id of
   the transaction that wrote it; any ``UPDATE`` writes a new version with a new
   ``xmin``. A refresh reads ``(id, xmin)`` of the active rows through the partial index
   on active states (two small columns, no job script or environment), in one
   ``REPEATABLE READ`` transaction.
2. **Fetch and parse only those.** Rows whose ``xmin`` differs from the copy's, or that
   are new, are fetched whole in the same snapshot (bounded ``IN`` lists) and parsed;
   rows no longer active are dropped. An unchanged ``xmin`` is the same row version
   (ids are 32 bits and wrap only after about four billion transactions; ``VACUUM
   FREEZE`` keeps the value visible), so the copy equals the snapshot's active set.
3. **Keys.** Idempotency keys are read from ``top - KEY_SLACK_S`` on (``top``: the
   newest key time already held), so a key stamped shortly before an earlier refresh but
   committed after it is still picked up; the final catch-up reads from
   ``top - FINAL_KEY_SLACK_S``.

Cost: a refresh reads two integers per active job and parses only what changed since
the last one; the takeover's catch-up therefore parses at most ``standby_refresh_s`` of
the old leader's changes. What is not kept warm (small, read at takeover): nodes, steps of
running jobs, the fair-share usage row, dependency targets, the id counter.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from corral.controller.records import JobRecord
from corral.controller.rows import record_from_row
from corral.controller.store import ACTIVE_STATE_VALUES, jobs, submit_keys

log = logging.getLogger("corral.warm")

FETCH_CHUNK = 1000  # rows per IN list
KEY_SLACK_S = 30.0
FINAL_KEY_SLACK_S = 300.0
_ACTIVE_SQL = "(" + ",".join(f"'{s}'" for s in ACTIVE_STATE_VALUES) + ")"


@dataclass(frozen=True, slots=True)
class KeyRow:
    key: str
    time: float
    answer: str


class WarmState:
    """The standby's copy; ``refresh`` runs on a worker thread, one at a time."""

    def __init__(self, engine: Engine, refresh_s: float, key_ttl_s: float) -> None:
        self.engine = engine
        self.refresh_s = refresh_s
        self.key_ttl_s = key_ttl_s
        self.records: dict[int, tuple[str, JobRecord]] = {}  # id -> (xmin, record)
        self.keys: dict[str, KeyRow] = {}
        self.key_top = 0.0
        self.refreshes = 0
        self.parsed = 0  # rows parsed in all refreshes
        self.last = {"rows": 0, "changed": 0, "seconds": 0.0}
        self._lock = threading.Lock()
        self.ready = False  # one refresh completed: the copy can be used

    # ---- blocking ----------------------------------------------------------------

    def refresh(self, *, final: bool = False) -> None:
        with self._lock:
            t0 = time.monotonic()
            with self.engine.connect() as conn:
                conn = conn.execution_options(isolation_level="REPEATABLE READ")
                with conn.begin():
                    marks = conn.exec_driver_sql(
                        f"SELECT id, xmin::text FROM jobs WHERE state IN {_ACTIVE_SQL}").all()
                    keep: dict[int, tuple[str, JobRecord]] = {}
                    changed: list[int] = []
                    for jid, xmin in marks:
                        old = self.records.get(int(jid))
                        if old is not None and old[0] == xmin:
                            keep[int(jid)] = old
                        else:
                            changed.append(int(jid))
                    for row in self._fetch(conn, changed):
                        try:
                            keep[int(row.id)] = (str(row.xmin), record_from_row(row))
                        except Exception:  # as Controller.start: one bad row is left out
                            log.exception("job %s: its stored record cannot be read", row.id)
                    self._refresh_keys(conn, FINAL_KEY_SLACK_S if final else KEY_SLACK_S)
            self.records = keep
            self.refreshes += 1
            self.parsed += len(changed)
            self.last = {"rows": len(marks), "changed": len(changed),
                         "seconds": round(time.monotonic() - t0, 4)}
            self.ready = True

    @staticmethod
    def _fetch(conn: Any, ids: Sequence[int]) -> list[Any]:
        out: list[Any] = []
        cols = [*jobs.c, sa.literal_column("xmin::text").label("xmin")]
        for i in range(0, len(ids), FETCH_CHUNK):
            out.extend(conn.execute(sa.select(*cols).where(
                jobs.c.id.in_(ids[i:i + FETCH_CHUNK]))))
        return out

    def _refresh_keys(self, conn: Any, slack_s: float) -> None:
        now = time.time()
        since = max(self.key_top - slack_s, now - self.key_ttl_s) if self.keys \
            else now - self.key_ttl_s
        for row in conn.execute(sa.select(submit_keys).where(submit_keys.c.time >= since)):
            self.keys[str(row.key)] = KeyRow(str(row.key), float(row.time), str(row.answer))
            self.key_top = max(self.key_top, float(row.time))
        old = now - self.key_ttl_s
        for k in [k for k, r in self.keys.items() if r.time < old]:
            del self.keys[k]

    def catch_up(self) -> tuple[list[JobRecord], list[KeyRow]]:
        """At takeover: the last refresh, then the records (id order) and the keys
        (oldest first), handed over; the copy is empty afterwards."""
        self.refresh(final=True)
        with self._lock:
            recs = [self.records[j][1] for j in sorted(self.records)]
            keys = sorted(self.keys.values(), key=lambda r: r.time)
            self.records, self.keys = {}, {}
            log.info("warm takeover: %d active jobs (%d changed since the previous refresh, "
                     "%.3f s), %d submit keys", len(recs), self.last["changed"],
                     self.last["seconds"], len(keys))
            return recs, keys

    # ---- the loop's side ----------------------------------------------------------

    async def run(self) -> None:
        """Refresh until cancelled (while standing by)."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                await loop.run_in_executor(None, self.refresh)
            except Exception as exc:  # noqa: BLE001 - no schema yet, database away
                log.debug("standby refresh failed: %s", exc)
            await asyncio.sleep(self.refresh_s)
