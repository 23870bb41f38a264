"""The durable log of the controller: jobs and nodes in SQL (SQLite WAL or PostgreSQL).

Design: the controller keeps active jobs in memory (``state.py``); this store is their
durable copy and the queryable history. Writes are queued and applied in order, every
operation queued meanwhile in ONE transaction, before the callers' futures resolve:
concurrent submits share a commit (group commit), and an operation queued after another
is never committed before it (the binder relies on this: a job's start is persisted only
after its insert). Where they run:

- **SQLite** (``inline``, once ``bind_loop`` was called): on the controller's event loop
  itself, in a callback scheduled when the first operation of a batch is queued (so a
  batch is everything queued during one turn of the loop), on one long-lived connection.
  A commit costs about 30 us here; handing it to a thread and back cost several times
  that in wake-ups and GIL hand-offs, on every submit. Operations queued from other
  threads are passed to the loop first, so the order stays one order.
- **PostgreSQL** (or before ``bind_loop``): ONE writer thread, same batching, so network
  round trips never block the event loop.

Durability: SQLite runs in WAL mode with ``synchronous=NORMAL``. A commit is in the WAL
file before the future resolves, so a crash of the controller process (``kill -9``) loses
nothing that was acknowledged; a power loss or kernel crash may lose the last commits
(set ``synchronous=FULL`` via ``database_url`` ``?synchronous=full`` to fsync each commit).

Reads (history, one job) use separate connections (WAL readers do not block the writer).
The hot paths never scan the jobs table: active jobs are loaded once at start through the
partial index on active states; history queries go through the user/end-time indexes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from corral.controller.errors import ApiError

log = logging.getLogger("corral.store")

metadata = sa.MetaData()

ACTIVE_STATE_VALUES = ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING")

jobs = sa.Table(
    "jobs", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("array_job_id", sa.Integer, nullable=True),
    sa.Column("array_task_id", sa.Integer, nullable=True),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("user", sa.Text, nullable=False),
    sa.Column("uid", sa.Integer, nullable=False),
    sa.Column("account", sa.Text, nullable=True),
    sa.Column("partition", sa.Text, nullable=True),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("submit_time", sa.Float, nullable=False),
    sa.Column("start_time", sa.Float, nullable=True),
    sa.Column("end_time", sa.Float, nullable=True),
    sa.Column("exit_code", sa.Integer, nullable=True),
    sa.Column("restarts", sa.Integer, nullable=False, default=0),
    sa.Column("nodes", sa.Text, nullable=False, default=""),
    sa.Column("submission", sa.Text, nullable=False),  # JobSubmission JSON (immutable)
    sa.Column("data", sa.Text, nullable=False),  # mutable record fields JSON
    sa.Index("ix_jobs_active", "state",
             sqlite_where=sa.text("state IN ('PENDING','RUNNING','SUSPENDED','COMPLETING')"),
             postgresql_where=sa.text(
                 "state IN ('PENDING','RUNNING','SUSPENDED','COMPLETING')")),
    sa.Index("ix_jobs_user_end", "user", "end_time"),
    sa.Index("ix_jobs_end", "end_time"),
    sa.Index("ix_jobs_array", "array_job_id"),
    sa.Index("ix_jobs_name", "name", "id"),
)

nodes = sa.Table(
    "nodes", metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("spec", sa.Text, nullable=False),
    sa.Column("admin_state", sa.Text, nullable=False, default=""),
    sa.Column("reason", sa.Text, nullable=False, default=""),
    sa.Column("data", sa.Text, nullable=False, default="{}"),
)

# job steps (``srun`` inside a job): one row per step of one run of a job
steps = sa.Table(
    "steps", metadata,
    sa.Column("job_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("restarts", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("step_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("start_time", sa.Float, nullable=False),
    sa.Column("end_time", sa.Float, nullable=True),
    sa.Column("data", sa.Text, nullable=False),  # argv, ntasks, nodes, cpus, exit, pid
)

# the audit trail of operator actions (``corral.controller.audit``): append-only
audit = sa.Table(
    "audit", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("time", sa.Float, nullable=False),
    sa.Column("user", sa.Text, nullable=False),
    sa.Column("uid", sa.Integer, nullable=False),
    sa.Column("via", sa.Text, nullable=False),
    sa.Column("action", sa.Text, nullable=False),
    sa.Column("target", sa.Text, nullable=False),
    sa.Column("details", sa.Text, nullable=False),  # JSON object
    sa.Column("outcome", sa.Text, nullable=False),  # "ok" or "<error code>: <message>"
    sa.Index("ix_audit_time", "time"),
)

meta = sa.Table(
    "meta", metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("value", sa.Text, nullable=False),
)

# high availability (``corral.controller.leadership``): the lease of the one leader, with
# the fencing epoch every leader write is checked against (one row, id 1)
leader = sa.Table(
    "leader", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("epoch", sa.BigInteger, nullable=False),
    sa.Column("holder", sa.Text, nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("since", sa.Float, nullable=False),
    sa.Column("expires", sa.Float, nullable=False),  # the database's clock, epoch seconds
)

# atomic counters (``job_id``: the next job id to reserve; ``corral.controller.ids``)
counters = sa.Table(
    "counters", metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("value", sa.BigInteger, nullable=False),
)

# idempotency keys of submissions: a retried submit answers the first one's jobs
# (``corral.controller.submitkeys``; one B-tree in time order: appends, range scans)
submit_keys = sa.Table(
    "submit_keys", metadata,
    sa.Column("time", sa.Float, primary_key=True),
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("answer", sa.Text, nullable=False),  # the submit's JSON answer
    sqlite_with_rowid=False,
)

# job state changes in commit order (``corral.controller.events``): written in the same
# transaction as the change itself, so a reader's cursor (the id) survives a restart
events = sa.Table(
    "events", metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True,
              autoincrement=False),
    sa.Column("time", sa.Float, nullable=False),
    sa.Column("job_id", sa.Integer, nullable=False),
    sa.Column("array_job_id", sa.Integer, nullable=True),
    sa.Column("user", sa.Text, nullable=False),
    sa.Column("data", sa.Text, nullable=False),  # the event's JSON (as served)
    sa.Index("ix_events_user", "user", "id"),
    sa.Index("ix_events_job", "job_id"),
    sa.Index("ix_events_array", "array_job_id"),
    sa.Index("ix_events_time", "time"),
)

# large arrays' remainders not yet split into jobs (``corral.controller.arraytail``)
array_tails = sa.Table(
    "array_tails", metadata,
    sa.Column("array_job_id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("user", sa.Text, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("submission", sa.Text, nullable=False),
    sa.Column("data", sa.Text, nullable=False),  # next_pos, taken, hold, times
    sa.Index("ix_array_tails_user", "user"),
)

# node state and reservation history for utilization reports (sreport's Down, PLND Down,
# Reserved; ``corral.controller.nodehistory``): a row per change, kind "node" or "resv"
node_history = sa.Table(
    "node_history", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("time", sa.Float, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=False),
    sa.Column("data", sa.Text, nullable=False),
    sa.Index("ix_node_history_time", "time"),
    sa.Index("ix_node_history_name", "kind", "name"),
)

# job mail (``corral.controller.outbox``): one row per mail, keyed by its dedup key
# (job, run, event, recipient); written with the job change that owes it, then marked
# sent or dropped; rows that are not owed any more are pruned after ``MAIL_KEEP_S``
mail_outbox = sa.Table(
    "mail_outbox", metadata,
    sa.Column("key", sa.Text, primary_key=True),
    sa.Column("job_id", sa.Integer, nullable=False),
    sa.Column("time", sa.Float, nullable=False),
    sa.Column("state", sa.Text, nullable=False),  # owed, sent, dropped
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("next_try", sa.Float, nullable=False),
    sa.Column("data", sa.Text, nullable=False),  # recipient, subject, type, facts (JSON)
    sa.Index("ix_mail_outbox_state", "state"),
    sa.Index("ix_mail_outbox_time", "time"),
)

Op = Callable[[Connection], Any]


class Fenced(ApiError):
    """This controller is no longer the leader: the database refused its write (another
    controller holds a newer fencing epoch). Answered as HTTP 503 ``not_leader``."""

    def __init__(self, message: str) -> None:
        super().__init__("not_leader", message)

    @property
    def status(self) -> int:
        return 503  # as a standby answers: ask the leader


_Fut = Future[Any] | asyncio.Future[Any]


class Store:
    """SQL store with group commits, on the event loop (SQLite) or a writer thread."""

    def __init__(self, url: str, *, inline: bool | None = None) -> None:
        self.url = url
        self.engine: Engine = _make_engine(url)
        self._q: queue.Queue[tuple[Op, Future[Any]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._writer, name="corral-store", daemon=True)
        self.commits = 0
        self.ops = 0
        self._closed = False
        # SQLite: the hot inserts and updates go to the sqlite3 connection itself (inside
        # the same transaction), skipping SQLAlchemy's execution layers
        self.sqlite = url.startswith("sqlite")
        self.inline = self.sqlite if inline is None else inline
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._pending: list[tuple[Op, _Fut]] = []
        self._flush_scheduled = False
        self._conn: Connection | None = None
        # high availability: ``fence(conn)`` runs first in every write transaction and
        # raises ``Fenced`` once another controller leads; ``on_fenced`` is told (once)
        self.fence: Op | None = None
        self.on_fenced: Callable[[Fenced], None] | None = None
        self.fenced = False
        # callbacks an op registered (``after_commit``) for once its batch committed; run
        # on ``hook_loop`` (the controller's event loop) when one is set
        self._after: list[Callable[[], None]] = []
        self.hook_loop: asyncio.AbstractEventLoop | None = None
        self._sql: dict[tuple[str, tuple[str, ...]], str] = {}  # _insert_sql/_update_sql

    # ---- lifecycle -----------------------------------------------------------------

    def open(self) -> None:
        from corral.controller.migrate import upgrade

        upgrade(self.engine)
        self._thread.start()

    async def bind_loop(self) -> None:
        """From now on, commit on the running event loop (``inline`` stores only). What
        the writer thread still holds is committed first, so the order is kept."""
        if not self.inline or self._loop is not None:
            return
        await asyncio.wrap_future(self.submit(lambda conn: None))
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._pending:  # normally flushed by the loop before (Controller.stop)
            batch, self._pending = self._pending, []
            self._run_batch(batch)
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._thread.is_alive():
            self._q.put(None)
            self._thread.join(timeout=10)
        self.engine.dispose()

    # ---- writes ----------------------------------------------------------------------

    def submit(self, op: Op) -> Future[Any]:
        """Queue ``op(conn)``; the future resolves once its transaction committed."""
        fut: Future[Any] = Future()
        if self._loop is not None:
            if threading.get_ident() == self._loop_thread:
                self._enqueue(op, fut)
            else:
                self._loop.call_soon_threadsafe(self._enqueue, op, fut)
            return fut
        self._q.put((op, fut))
        return fut

    def submit_async(self, op: Op) -> asyncio.Future[Any]:
        """``submit`` for callers on the event loop: an awaitable that resolves without a
        detour through another thread when the store commits on the loop."""
        if self._loop is not None and threading.get_ident() == self._loop_thread:
            fut: asyncio.Future[Any] = self._loop.create_future()
            self._enqueue(op, fut)
            return fut
        return asyncio.wrap_future(self.submit(op))

    def flush(self) -> None:
        """Commit what is queued on the loop now (on the loop thread)."""
        self._flush_scheduled = False
        batch, self._pending = self._pending, []
        if batch:
            self._run_batch(batch)

    def after_commit(self, fn: Callable[[], None]) -> None:
        """Inside an op: run ``fn`` once this op's transaction committed (never when it
        rolled back), on ``hook_loop`` when one is set, in the order registered."""
        self._after.append(fn)

    def _run_after(self, fns: list[Callable[[], None]]) -> None:
        loop = self.hook_loop
        for fn in fns:
            if loop is None or (self._loop is loop
                                and threading.get_ident() == self._loop_thread):
                fn()
            else:
                loop.call_soon_threadsafe(fn)

    def _enqueue(self, op: Op, fut: _Fut) -> None:
        self._pending.append((op, fut))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            assert self._loop is not None
            self._loop.call_soon(self.flush)

    def _writer(self) -> None:
        while True:
            item = self._q.get()
            if item is None:
                return
            batch = [item]
            stop = False
            while True:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
            self._run_batch(batch)
            if stop:
                return

    def _run_batch(self, batch: Sequence[tuple[Op, _Fut]]) -> None:
        results: list[Any] = []
        self._after = []
        try:
            if self._loop is not None:  # inline: one connection for the store's lifetime
                if self._conn is None:
                    self._conn = self.engine.connect()
                conn = self._conn
                try:
                    with conn.begin():
                        if self.fence is not None:
                            self.fence(conn)
                        for op, _fut in batch:
                            results.append(op(conn))
                except Exception:
                    conn.close()  # a fresh one next time (the failure may be the connection)
                    self._conn = None
                    raise
            else:
                with self.engine.begin() as conn:
                    if self.fence is not None:
                        self.fence(conn)
                    for op, _fut in batch:
                        results.append(op(conn))
        except Fenced as exc:  # no longer the leader: nothing of this batch may commit
            self._after = []
            for _op, fut in batch:
                _resolve(fut, exc=exc)
            if not self.fenced:
                self.fenced = True
                log.error("store: %s", exc)
                if self.on_fenced is not None:
                    self.on_fenced(exc)
            return
        except Exception as exc:  # one bad op must not lose the others: retry one by one
            self._after = []
            if len(batch) > 1:
                for one in batch:
                    self._run_batch([one])
                return
            log.exception("store write failed")
            _resolve(batch[0][1], exc=exc)
            return
        self.commits += 1
        self.ops += len(batch)
        after, self._after = self._after, []
        if after:
            self._run_after(after)
        for (_op, fut), res in zip(batch, results, strict=True):
            _resolve(fut, res)

    # ---- operations (run in the writer thread) ---------------------------------------

    def _many(self, sql: str, params: list[dict[str, Any]]) -> Op:
        """``sql`` once per row of ``params`` at the driver level (sqlite3's
        ``executemany`` for SQLite: even SQLAlchemy's ``exec_driver_sql`` cost more)."""
        if self.sqlite:
            def run_raw(conn: Connection) -> None:
                _driver(conn).executemany(sql, params)
            return run_raw

        def run(conn: Connection) -> None:
            conn.exec_driver_sql(sql, params)  # type: ignore[arg-type, unused-ignore]
        return run

    def _param(self, name: str) -> str:
        style = self.engine.dialect.paramstyle
        return f"%({name})s" if style == "pyformat" else f":{name}"

    def _insert_sql(self, table: str, cols: tuple[str, ...]) -> str:
        """``INSERT INTO table (cols) VALUES (...)``, made once per table and columns."""
        key = (table, cols)
        sql = self._sql.get(key)
        if sql is None:
            sql = self._sql[key] = (
                f'INSERT INTO {table} ({", ".join(_q(c) for c in cols)}) VALUES '
                f'({", ".join(self._param(c) for c in cols)})')
        return sql

    def _update_sql(self, cols: tuple[str, ...]) -> str:
        """``UPDATE jobs SET`` the columns but ``_id`` ``WHERE id = _id``, made once."""
        key = ("UPDATE jobs", cols)
        sql = self._sql.get(key)
        if sql is None:
            sets = ", ".join(f"{_q(c)} = {self._param(c)}" for c in cols if c != "_id")
            sql = self._sql[key] = f'UPDATE jobs SET {sets} WHERE id = {self._param("_id")}'
        return sql

    def op_insert_jobs(self, rows: list[dict[str, Any]]) -> Op:
        """Plain driver-level ``executemany`` (the SQL expression layer costs more than the
        insert itself at thousands of rows per second; for SQLite, even SQLAlchemy's
        ``exec_driver_sql`` did)."""
        if not rows:
            return lambda conn: None
        return self._many(self._insert_sql("jobs", tuple(rows[0])), rows)

    def op_update_jobs(self, rows: list[dict[str, Any]]) -> Op:
        """Rows carry ``_id`` plus the columns to set (the same keys in every row)."""
        if not rows:
            return lambda conn: None
        return self._many(self._update_sql(tuple(rows[0])), rows)

    def op_insert_step(self, row: dict[str, Any]) -> Op:
        """One step row, at the driver level as ``op_insert_jobs`` (one per ``srun``: the
        expression layer cost more than the insert)."""
        return self._many(self._insert_sql("steps", tuple(row)), [row])

    def op_update_steps(self, rows: list[dict[str, Any]]) -> Op:
        """Rows carry the key (``job_id``, ``restarts``, ``step_id``) plus
        ``state``, ``end_time`` and ``data``."""
        if not rows:
            return lambda conn: None
        p = self._param
        sql = (f"UPDATE steps SET state = {p('state')}, end_time = {p('end_time')}, "
               f"data = {p('data')} WHERE job_id = {p('job_id')} AND "
               f"restarts = {p('restarts')} AND step_id = {p('step_id')}")
        keys = ("state", "end_time", "data", "job_id", "restarts", "step_id")
        params = [{k: row[k] for k in keys} for row in rows]
        return self._many(sql, params)

    @staticmethod
    def op_upsert_node(name: str, spec: dict[str, Any], admin_state: str, reason: str,
                       data: dict[str, Any]) -> Op:
        def run(conn: Connection) -> None:
            values = {"spec": json.dumps(spec), "admin_state": admin_state, "reason": reason,
                      "data": json.dumps(data)}
            updated = conn.execute(nodes.update().where(nodes.c.name == name).values(**values))
            if updated.rowcount == 0:
                conn.execute(nodes.insert().values(name=name, **values))
        return run

    @staticmethod
    def op_set_meta(key: str, value: str) -> Op:
        def run(conn: Connection) -> None:
            done = conn.execute(meta.update().where(meta.c.key == key).values(value=value))
            if done.rowcount == 0:
                conn.execute(meta.insert().values(key=key, value=value))
        return run

    def op_insert_keys(self, rows: list[dict[str, Any]]) -> Op:
        """Idempotency keys of submissions (``key``, ``time``, ``answer``)."""
        sql = (f'INSERT INTO submit_keys ("key", "time", "answer") VALUES '
               f'({self._param("key")}, {self._param("time")}, {self._param("answer")})')
        return self._many(sql, rows)

    def op_insert_events(self, rows: list[dict[str, Any]]) -> Op:
        """Job events (``id``, ``time``, ``job_id``, ``array_job_id``, ``user``, ``data``)."""
        cols = ("id", "time", "job_id", "array_job_id", "user", "data")
        return self._many(self._insert_sql("events", cols), rows)

    @staticmethod
    def op_save_tail(row: dict[str, Any]) -> Op:
        """Insert or update one array tail row (``arraytail.ArrayTail.row``)."""
        def run(conn: Connection) -> None:
            key = row["array_job_id"]
            values = {k: v for k, v in row.items() if k != "array_job_id"}
            done = conn.execute(array_tails.update()
                                .where(array_tails.c.array_job_id == key).values(**values))
            if done.rowcount == 0:
                conn.execute(array_tails.insert().values(**row))
        return run

    @staticmethod
    def op_delete_tail(array_job_id: int) -> Op:
        def run(conn: Connection) -> None:
            conn.execute(array_tails.delete().where(array_tails.c.array_job_id == array_job_id))
        return run

    @staticmethod
    def op_prune_events(before: float, keep_after_id: int) -> Op:
        """Forget events older than ``before`` (never the newest one: its id is where the
        next controller continues counting)."""
        def run(conn: Connection) -> None:
            conn.execute(events.delete().where((events.c.time < before)
                                               & (events.c.id < keep_after_id)))
        return run

    @staticmethod
    def op_insert_mail(rows: list[dict[str, Any]]) -> Op:
        """Owed mails (the columns of ``mail_outbox``); a row whose key is stored already
        is left as it is (the same mail owed again: a replayed job change). The op returns
        the keys it inserted."""
        sql = sa.text('INSERT INTO mail_outbox ("key", job_id, "time", state, attempts, '
                      'next_try, data) VALUES (:key, :job_id, :time, :state, :attempts, '
                      ':next_try, :data) ON CONFLICT ("key") DO NOTHING')

        def run(conn: Connection) -> list[str]:
            return [row["key"] for row in rows if conn.execute(sql, row).rowcount]
        return run

    @staticmethod
    def op_update_mail(key: str, state: str, attempts: int, next_try: float) -> Op:
        def run(conn: Connection) -> None:
            conn.execute(mail_outbox.update().where(mail_outbox.c.key == key).values(
                state=state, attempts=attempts, next_try=next_try))
        return run

    @staticmethod
    def op_prune_mail(before: float) -> Op:
        """Forget mails sent or dropped before ``before`` (owed ones stay)."""
        def run(conn: Connection) -> None:
            conn.execute(mail_outbox.delete().where((mail_outbox.c.time < before)
                                                    & (mail_outbox.c.state != "owed")))
        return run

    @staticmethod
    def op_reserve_ids(n: int) -> Op:
        """Reserve ``n`` consecutive job ids from the database's counter (atomic: the
        row is locked until commit); the op returns the first one."""
        def run(conn: Connection) -> int:
            v = conn.execute(sa.text("UPDATE counters SET value = value + :n "
                                     "WHERE name = 'job_id' RETURNING value"), {"n": n}).scalar()
            if v is None:  # a database from before the counter (should not happen)
                top = conn.execute(sa.select(sa.func.max(jobs.c.id))).scalar()
                v = int(top or 0) + 1 + n
                conn.execute(counters.insert().values(name="job_id", value=v))
            return int(v) - n
        return run

    @staticmethod
    def op_reset_ids(first_job_id: int) -> Op:
        """At takeover (the previous leader fenced off): the counter continues right after
        the highest stored id (ids reserved but never used are handed out again), never
        below ``first_job_id``; the op returns the value."""
        def run(conn: Connection) -> int:
            top = conn.execute(sa.select(sa.func.max(jobs.c.id))).scalar()
            value = max(int(top or 0) + 1, first_job_id)
            done = conn.execute(counters.update().where(counters.c.name == "job_id")
                                .values(value=value))
            if done.rowcount == 0:
                conn.execute(counters.insert().values(name="job_id", value=value))
            return value
        return run

    @staticmethod
    def op_prune_keys(before: float) -> Op:
        def run(conn: Connection) -> None:
            conn.execute(submit_keys.delete().where(submit_keys.c.time < before))
        return run

    # ---- reads (any thread) -----------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        with self.engine.connect() as conn:
            v = conn.execute(sa.select(meta.c.value).where(meta.c.key == key)).scalar()
            return None if v is None else str(v)

    def load_active(self) -> list[sa.Row[Any]]:
        with self.engine.connect() as conn:
            return list(conn.execute(
                sa.select(jobs).where(jobs.c.state.in_(ACTIVE_STATE_VALUES))
                .order_by(jobs.c.id)))

    def load_steps(self, job_ids: Iterable[int]) -> list[sa.Row[Any]]:
        """Step rows of these jobs (every run), in job and step order."""
        id_list = list(job_ids)
        if not id_list:
            return []
        out: list[sa.Row[Any]] = []
        with self.engine.connect() as conn:
            for i in range(0, len(id_list), 500):  # bounded IN lists
                chunk = id_list[i:i + 500]
                out.extend(conn.execute(
                    sa.select(steps).where(steps.c.job_id.in_(chunk))
                    .order_by(steps.c.job_id, steps.c.restarts, steps.c.step_id)))
        return out

    def load_mail(self, state: str | None = "owed") -> list[sa.Row[Any]]:
        """Mail rows in ``state`` (all: None), oldest first."""
        q = sa.select(mail_outbox)
        if state is not None:
            q = q.where(mail_outbox.c.state == state)
        with self.engine.connect() as conn:
            return list(conn.execute(q.order_by(mail_outbox.c.time, mail_outbox.c.key)))

    def load_nodes(self) -> list[sa.Row[Any]]:
        with self.engine.connect() as conn:
            return list(conn.execute(sa.select(nodes)))

    def load_keys(self, since: float) -> list[sa.Row[Any]]:
        """Idempotency keys recorded since ``since`` (oldest first)."""
        with self.engine.connect() as conn:
            return list(conn.execute(sa.select(submit_keys).where(submit_keys.c.time >= since)
                                     .order_by(submit_keys.c.time)))

    def load_tails(self, *, states: Sequence[str] | None = None, user: str | None = None,
                   ids: Sequence[int] | None = None) -> list[sa.Row[Any]]:
        """Array tail rows (all, or by state, user, array ids)."""
        q = sa.select(array_tails)
        if states is not None:
            q = q.where(array_tails.c.state.in_(list(states)))
        if user is not None:
            q = q.where(array_tails.c.user == user)
        if ids is not None:
            q = q.where(array_tails.c.array_job_id.in_(list(ids)[:1000]))
        with self.engine.connect() as conn:
            return list(conn.execute(q.order_by(array_tails.c.array_job_id)))

    @staticmethod
    def op_insert_history(rows: list[dict[str, Any]]) -> Op:
        """Node history rows (``time``, ``kind``, ``name``, ``data``)."""
        def run(conn: Connection) -> None:
            if rows:
                conn.execute(node_history.insert(), rows)
        return run

    def load_history(self, since: float, until: float) -> list[sa.Row[Any]]:
        """History rows before ``until`` that may matter from ``since`` on: each one
        written since then, and the last one of every node or reservation before it."""
        last = (sa.select(sa.func.max(node_history.c.id))
                .where(node_history.c.time < since)
                .group_by(node_history.c.kind, node_history.c.name))
        q = sa.select(node_history).where(
            sa.or_(sa.and_(node_history.c.time >= since, node_history.c.time < until),
                   node_history.c.id.in_(last))).order_by(node_history.c.id)
        with self.engine.connect() as conn:
            return list(conn.execute(q))

    def load_history_last(self) -> list[sa.Row[Any]]:
        """The newest history row of every node and reservation."""
        last = sa.select(sa.func.max(node_history.c.id)).group_by(
            node_history.c.kind, node_history.c.name)
        with self.engine.connect() as conn:
            return list(conn.execute(sa.select(node_history)
                                     .where(node_history.c.id.in_(last))))

    def max_event_id(self) -> int:
        with self.engine.connect() as conn:
            v = conn.execute(sa.select(sa.func.max(events.c.id))).scalar()
            return int(v or 0)

    def read_events(self, after: int, limit: int, *, user: str | None = None,
                    job_ids: Sequence[int] | None = None) -> list[tuple[int, str]]:
        """``(id, data)`` of the events after id ``after`` in id order, at most ``limit``;
        by the primary key, or the user's or the jobs' index when filtered."""
        q = sa.select(events.c.id, events.c.data).where(events.c.id > after)
        if user is not None:
            q = q.where(events.c.user == user)
        if job_ids:
            ids = list(job_ids)[:1000]
            q = q.where(sa.or_(events.c.job_id.in_(ids), events.c.array_job_id.in_(ids)))
        q = q.order_by(events.c.id).limit(limit)
        with self.engine.connect() as conn:
            return [(int(r[0]), str(r[1])) for r in conn.execute(q)]

    def max_job_id(self) -> int:
        with self.engine.connect() as conn:
            v = conn.execute(sa.select(sa.func.max(jobs.c.id))).scalar()
            return int(v or 0)

    def get_jobs(self, ids: Iterable[int]) -> list[sa.Row[Any]]:
        id_list = list(ids)
        if not id_list:
            return []
        with self.engine.connect() as conn:
            return list(conn.execute(sa.select(jobs).where(jobs.c.id.in_(id_list))))

    def array_ended(self, array_job_id: int) -> list[tuple[str, int, int]]:
        """``(state, lowest exit code, highest)`` over the array's finished tasks stored,
        one per end state (an unset exit code counts 0): an aggregate over the array
        index, never the tasks' rows."""
        code = sa.func.coalesce(jobs.c.exit_code, 0)
        q = (sa.select(jobs.c.state, sa.func.min(code), sa.func.max(code))
             .where(jobs.c.array_job_id == array_job_id)
             .where(jobs.c.state.not_in(ACTIVE_STATE_VALUES))
             .group_by(jobs.c.state))
        with self.engine.connect() as conn:
            return [(str(r[0]), int(r[1]), int(r[2])) for r in conn.execute(q)]

    def get_array_tasks(self, array_job_id: int) -> list[sa.Row[Any]]:
        with self.engine.connect() as conn:
            return list(conn.execute(
                sa.select(jobs).where(jobs.c.array_job_id == array_job_id)
                .order_by(jobs.c.array_task_id)))

    def history(
        self, *, user: str | None = None, since: float | None = None,
        until: float | None = None, states: list[str] | None = None,
        ids: list[int] | None = None, array_ids: list[int] | None = None,
        account: str | None = None, partition: str | None = None, limit: int | None = None,
        after: int | None = None, names: list[str] | None = None,
    ) -> list[sa.Row[Any]]:
        q = sa.select(jobs)
        if names is not None:  # sacct --name: the (name, id) index
            q = q.where(jobs.c.name.in_(names))
        if after is not None:  # paging: the rows after the last id of the previous page
            q = q.where(jobs.c.id > after)
        windowed = since is not None and ids is None and array_ids is None
        if user is not None and not windowed:
            q = q.where(jobs.c.user == user)
        if windowed:
            # lifetime overlaps [since, until]: not ended before since. Written as two
            # index ranges (still running, ended since), so no plan scans the table
            # (``end_time IS NULL OR end_time >= :since`` made SQLite scan it)
            def alive(*conds: Any) -> sa.Select[Any]:
                sel = sa.select(jobs.c.id)
                if user is not None:
                    sel = sel.where(jobs.c.user == user)
                if names is not None:
                    sel = sel.where(jobs.c.name.in_(names))
                return sel.where(*conds)
            window = sa.union_all(alive(jobs.c.end_time.is_(None)),
                                  alive(jobs.c.end_time >= since)).subquery()
            q = q.where(jobs.c.id.in_(sa.select(window.c.id)))
        elif since is not None:
            q = q.where(sa.or_(jobs.c.end_time.is_(None), jobs.c.end_time >= since))
        if until is not None:
            q = q.where(jobs.c.submit_time <= until)
        if states:
            q = q.where(jobs.c.state.in_(states))
        if ids is not None or array_ids is not None:
            conds = []
            if ids:
                conds.append(jobs.c.id.in_(ids))
            if array_ids:
                conds.append(jobs.c.array_job_id.in_(array_ids))
            q = q.where(sa.or_(*conds)) if conds else q.where(sa.false())
        if account is not None:
            q = q.where(jobs.c.account == account)
        if partition is not None:
            q = q.where(jobs.c.partition == partition)
        q = q.order_by(jobs.c.id)
        if limit is not None:
            q = q.limit(limit)
        with self.engine.connect() as conn:
            return list(conn.execute(q))


def _driver(conn: Connection) -> Any:
    """The DB-API connection under ``conn`` (sqlite3's, for the SQLite store): its
    statements run in the transaction ``conn`` began (sqlite3 begins one implicitly
    before the first write and SQLAlchemy's commit commits it)."""
    return conn.connection.driver_connection


def _resolve(fut: _Fut, res: Any = None, exc: BaseException | None = None) -> None:
    if fut.done():  # an awaiting task was cancelled meanwhile: nothing to tell it
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(res)


def _q(col: str) -> str:
    return f'"{col}"'


def _make_engine(url: str) -> Engine:
    synchronous = "NORMAL"
    if url.startswith("sqlite"):
        base, _, query = url.partition("?")
        params = dict(p.split("=", 1) for p in query.split("&") if "=" in p)
        synchronous = params.pop("synchronous", "normal").upper()
        if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"database_url: bad synchronous={synchronous!r}")
        url = base + ("?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else "")
        engine = sa.create_engine(url, connect_args={"check_same_thread": False,
                                                     "timeout": 30})

        @sa.event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: Any, _rec: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA synchronous={synchronous}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    return sa.create_engine(url, pool_pre_ping=True, connect_args=pg_connect_args(url))


def pg_connect_args(url: str) -> dict[str, Any]:
    """Connection settings for PostgreSQL: a dead link or server is noticed in seconds
    (connect timeout, TCP keepalives and user timeout), not after the kernel's defaults of
    minutes; a controller cut off from its database must stop acting quickly."""
    if not url.startswith("postgresql"):
        return {}
    return {"connect_timeout": 3, "keepalives": 1, "keepalives_idle": 2,
            "keepalives_interval": 1, "keepalives_count": 2, "tcp_user_timeout": 3000,
            "application_name": "corral"}
