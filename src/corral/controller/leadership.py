"""Leadership through the database: one leader, any number of standbys, fencing.

Algorithm (PostgreSQL; a SQLite store has one controller, which always leads):

1. **Who may try.** Every controller holds its own *session* connection and polls
   ``pg_try_advisory_lock(LOCK_KEY)`` every ``poll_s``. PostgreSQL gives the lock to one
   session and frees it the moment that session ends: a ``kill -9`` of the leader closes
   its socket, its backend exits, the lock is free at once.
   A holder cut off without a closed connection (a partition, a dead host) keeps its
   backend, and the lock, until the server's keepalive gives up; a standby that finds
   the lease expired for more than ``lease_s`` with the lock still held ends that
   backend (``pg_terminate_backend``: the same database role may).
2. **The lease.** The lock holder takes over only once the lease row (``leader``, id 1)
   has expired by the database's clock: it then bumps the fencing ``epoch`` and writes
   itself in as holder with ``expires = now + lease_s``. The leader renews every
   ``renew_s`` (on the session that holds the lock, ``... WHERE epoch = mine``).
3. **Fencing.** Every write transaction of the leader's store begins with
   ``SELECT epoch FROM leader WHERE id = 1 FOR SHARE`` and aborts (``store.Fenced``)
   when the epoch is not its own. A takeover's ``UPDATE`` of that row waits for the
   leader's open transactions, so each of them commits entirely before the new epoch or
   not at all: a deposed leader can commit nothing.
4. **Stepping down.** The leader stops acting (drops its agents, refuses requests) when a
   renewal fails, when a write is fenced, or when ``lease_s - margin_s`` passed since the
   start of its last successful renewal (a link that hangs instead of failing). Renewals
   run on the lease thread, from the takeover on (while the state loads too), so a busy
   event loop does not lose the lease; the thread stops renewing when the loop has not
   turned for ``max(10 s, 3 lease_s)`` (a wedged process). Its lease
   ran until at least ``renewal start + lease_s`` by the database's clock, so a standby
   takes over only after the old leader stopped (clocks may differ in offset, not rate).

Failover time after a ``kill -9``: the rest of the lease (at most ``lease_s``) plus one
poll, plus the takeover (load the active jobs) and the agents' reconnect.
Reference: the lease and fencing-token pattern (Gray & Cheriton 1989; Kleppmann,
"How to do distributed locking", 2016), with PostgreSQL's advisory locks as the mutex.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from corral.controller.store import Fenced, Op, pg_connect_args

log = logging.getLogger("corral.leadership")

LOCK_KEY = 0x636F7202  # the advisory lock of leadership ("cor" 2)
_NOW = "extract(epoch from clock_timestamp())"
PEER_TTL_S = 10.0  # a controller not seen for this long is left out of the peers


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    holder: str
    url: str
    epoch: int
    since: float
    expires: float
    now: float  # the database's clock when read

    @property
    def alive(self) -> bool:
        return bool(self.holder) and self.expires > self.now

    def to_json(self) -> dict[str, Any]:
        return {"holder": self.holder, "url": self.url, "epoch": self.epoch,
                "since": self.since, "expires_in_s": round(self.expires - self.now, 3)}


DEFAULT_LEASE_S = 3.0


def ha_settings(cfg: Any) -> tuple[str | None, float]:
    """``[controller] name`` and ``lease_s``."""
    return (getattr(cfg.controller, "name", None),
            float(getattr(cfg.controller, "lease_s", DEFAULT_LEASE_S)))


def fence_op(epoch: int) -> Op:
    """The check that opens every write transaction of the leader of ``epoch``."""
    def check(conn: Connection) -> None:
        cur = conn.exec_driver_sql("SELECT epoch FROM leader WHERE id = 1 FOR SHARE").scalar()
        if cur is None or int(cur) != epoch:
            raise Fenced(f"not the leader any more: fencing epoch {epoch}, the database "
                         f"has {cur}")
    return check


class Leadership:
    """This controller's seat: ``acquire`` (standby until it leads), ``hold`` (renew until
    lost), ``release``. Blocking database calls run on one thread of its own."""

    def __init__(self, url: str, holder: str, advertise: str, *, lease_s: float = 3.0,
                 renew_s: float | None = None, poll_s: float = 0.2) -> None:
        self.url = url
        self.holder = holder
        self.advertise = advertise
        self.lease_s = lease_s
        self.renew_s = renew_s if renew_s is not None else max(0.1, lease_s / 6)
        self.margin_s = min(0.5, lease_s / 4)
        self.poll_s = poll_s
        self.engine = sa.create_engine(url, poolclass=sa.pool.NullPool,
                                       connect_args=pg_connect_args(url))
        self._conn: Connection | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="corral-lease")
        self.epoch: int | None = None
        self.info: LeaderInfo | None = None  # the last lease row read
        self.renewed_at = 0.0  # monotonic start of the last successful renewal
        # the event loop's last turn in ``hold``: the lease thread renews only while the
        # loop ran within ``wedged_s`` (a long cycle is fine, a wedged process is not)
        self.loop_beat = 0.0
        self.wedged_s = max(10.0, 3 * lease_s)
        self.takeovers = 0
        # every controller of the cluster seen in the last PEER_TTL_S (``meta`` rows
        # ``ctl:<name>``, written by each one about once a second): for ``scontrol ping``
        self.peers: list[dict[str, Any]] = []
        self._beat_at = 0.0
        self.role = "standby"

    # ---- blocking parts (the lease thread) ------------------------------------------

    def _session(self) -> Connection:
        if self._conn is None:
            self._conn = self.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        return self._conn

    def _drop_session(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - already broken
                pass
            self._conn = None

    def _read(self) -> LeaderInfo | None:
        row = self._session().exec_driver_sql(
            f"SELECT holder, url, epoch, since, expires, {_NOW} FROM leader WHERE id = 1"
        ).first()
        if row is None:
            return None
        return LeaderInfo(str(row[0]), str(row[1]), int(row[2]), float(row[3]),
                          float(row[4]), float(row[5]))

    def _beat(self) -> None:
        """About once a second: record this controller as present, read the others."""
        now = time.monotonic()
        if now - self._beat_at < 1.0:
            return
        self._beat_at = now
        conn = self._session()
        value = json.dumps({"url": self.advertise, "role": self.role, "time": time.time()})
        conn.execute(sa.text(
            "INSERT INTO meta (key, value) VALUES (:k, :v) ON CONFLICT (key) DO UPDATE "
            "SET value = EXCLUDED.value"), {"k": f"ctl:{self.holder}", "v": value})
        rows = conn.execute(sa.text("SELECT key, value FROM meta WHERE key LIKE 'ctl:%'")).all()
        peers = []
        for k, v in rows:
            try:
                peer = dict(json.loads(v), holder=str(k)[4:])
            except ValueError:
                continue
            if time.time() - float(peer.get("time") or 0) <= PEER_TTL_S:
                peers.append(peer)
        self.peers = sorted(peers, key=lambda p: (p.get("role") != "leader", p["holder"]))

    def _try_take(self) -> tuple[int | None, float]:
        """With the lock: take over if the lease expired. (epoch or None, seconds to
        wait before trying again)."""
        conn = self._session()
        self._beat()
        if not conn.exec_driver_sql(f"SELECT pg_try_advisory_lock({LOCK_KEY})").scalar():
            self.info = info = self._read()
            if info is not None and info.now > info.expires + self.lease_s:
                self._evict_lock_holder()
            return None, self.poll_s
        with self.engine.begin() as tx:
            row = tx.exec_driver_sql(
                f"SELECT epoch, expires, {_NOW}, holder FROM leader WHERE id = 1 FOR UPDATE"
            ).first()
            if row is None:
                raise RuntimeError("the leader table has no row: database not migrated")
            epoch, expires, now = int(row[0]), float(row[1]), float(row[2])
            if expires > now and str(row[3]) != self.holder:
                return None, min(self.poll_s, expires - now + 0.01)
            new = epoch + 1
            tx.execute(sa.text(
                f"UPDATE leader SET epoch = :e, holder = :h, url = :u, since = {_NOW}, "
                f"expires = {_NOW} + :lease WHERE id = 1"),
                {"e": new, "h": self.holder, "u": self.advertise, "lease": self.lease_s})
        self.renewed_at = time.monotonic()
        return new, 0.0

    def _evict_lock_holder(self) -> None:
        """The lease ran out more than ``lease_s`` ago and the lock is still held: its
        holder is a session the server has not yet seen die (a leader cut off without a
        closed connection lingers until the server's TCP keepalive gives up, two hours
        by the kernel's default). A live holder would have renewed (a leader) or taken
        over (a standby) long since, and a deposed leader's writes are fenced by the
        epoch, so ending that session is safe; it frees the lock for this standby."""
        rows = self._session().exec_driver_sql(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
            f"AND granted AND classid = 0 AND objid = {LOCK_KEY} AND objsubid = 1 "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND pid <> pg_backend_pid()").all()
        if rows:
            log.warning("standby: the lease expired but the leadership lock was still "
                        "held by a silent database session; ended it")

    def _renew(self, epoch: int) -> bool:
        started = time.monotonic()
        done = self._session().execute(sa.text(
            f"UPDATE leader SET expires = {_NOW} + :lease WHERE id = 1 AND epoch = :e"),
            {"lease": self.lease_s, "e": epoch})
        if done.rowcount != 1:
            return False
        self.renewed_at = started
        self.role = "leader"
        self._beat()
        return True

    def _release(self, epoch: int) -> None:
        conn = self._session()
        conn.execute(sa.text(f"UPDATE leader SET expires = {_NOW} WHERE id = 1 AND epoch = :e"),
                     {"e": epoch})
        conn.exec_driver_sql(f"SELECT pg_advisory_unlock({LOCK_KEY})")

    # ---- the loop's side ----------------------------------------------------------

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def acquire(self) -> int:
        """Wait as a standby until this controller leads; returns its fencing epoch."""
        logged = False
        while True:
            try:
                epoch, wait_s = await self._call(self._try_take)
            except Exception as exc:  # database unreachable: keep trying
                await self._call(self._drop_session)
                log.warning("leadership: cannot reach the database: %s", exc)
                await asyncio.sleep(max(self.poll_s, 0.5))
                continue
            if epoch is not None:
                self.epoch = int(epoch)
                self.takeovers += 1
                log.warning("leadership: this controller (%s) leads now, epoch %d",
                            self.holder, epoch)
                return self.epoch
            if not logged and self.info is not None:
                log.info("standby: the leader is %s (%s), epoch %d", self.info.holder,
                         self.info.url, self.info.epoch)
                logged = True
            await asyncio.sleep(wait_s)

    def _keep(self, epoch: int, quit_: threading.Event, out: list[str]) -> None:
        """The lease thread while leading: renew every ``renew_s`` until ``quit_`` or a
        renewal fails (``out`` gets why). Renewals do not wait for the event loop, so a
        loop busy for a while (a long first scheduling cycle, a large takeover) does not
        cost the lease; the loop's side still steps down when no renewal succeeded for
        ``lease_s - margin_s`` (a hanging database link)."""
        while not quit_.is_set():
            if time.monotonic() - self.loop_beat > self.wedged_s:
                out.append(f"the event loop has not run for {self.wedged_s:.0f} s")
                return  # a wedged leader must not keep the lease for ever
            try:
                ok = self._renew(epoch)
            except Exception as exc:  # noqa: BLE001 - the link or the server failed
                out.append(f"lease renewal failed: {exc}")
                return
            if not ok:
                out.append("another controller took the lease")
                return
            quit_.wait(self.renew_s)

    async def hold(self, epoch: int, stop: asyncio.Event) -> str:
        """Renew the lease until it is lost or ``stop`` is set; returns why it ended."""
        quit_ = threading.Event()
        why: list[str] = []
        self.loop_beat = time.monotonic()
        keeper = asyncio.ensure_future(self._call(self._keep, epoch, quit_, why))
        try:
            while True:
                self.loop_beat = time.monotonic()
                if stop.is_set():
                    return "stopped"
                if why:
                    return why[0]
                if keeper.done():
                    return "the lease thread ended"
                now = time.monotonic()
                if now > self.renewed_at + self.lease_s - self.margin_s:
                    return (f"no lease renewal for {now - self.renewed_at:.1f} s (the "
                            "database is unreachable)")
                try:  # wake for the deadline or stop (short steps)
                    await asyncio.wait_for(stop.wait(), timeout=min(0.05, self.renew_s))
                except TimeoutError:
                    pass
        finally:
            quit_.set()

    async def refresh(self) -> LeaderInfo | None:
        """Read the lease row (for a standby's answers)."""
        try:
            self.info = await self._call(self._read)
        except Exception:  # noqa: BLE001
            await self._call(self._drop_session)
        return self.info

    async def release(self) -> None:
        """Give the lease up (a clean stop): a standby takes over at once."""
        if self.epoch is None:
            return
        try:
            await asyncio.wait_for(self._call(self._release, self.epoch), timeout=2)
        except Exception:  # noqa: BLE001 - the lease then simply expires
            pass

    async def close(self) -> None:
        try:
            await asyncio.wait_for(self._call(self._drop_session), timeout=2)
        except Exception:  # noqa: BLE001
            pass
        self._pool.shutdown(wait=False)
        self.engine.dispose()
