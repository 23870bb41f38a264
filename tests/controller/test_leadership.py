"""Leadership through PostgreSQL (real server): one leader, fencing, takeover timing."""

from __future__ import annotations

import asyncio
import time

import pytest
import sqlalchemy as sa

from corral.controller.leadership import Leadership, fence_op
from corral.controller.rows import insert_row
from corral.controller.store import Fenced, Store
from tests.controller.test_store import _rec


def _seat(url: str, name: str, lease_s: float = 1.0) -> Leadership:
    return Leadership(url, name, f"http://{name}:1", lease_s=lease_s, poll_s=0.05)


def test_one_leader_fencing_and_takeover(pg_url: str) -> None:
    st = Store(pg_url)
    st.open()  # the schema (leader row)

    async def scenario() -> None:
        a, b = _seat(pg_url, "a"), _seat(pg_url, "b")
        epoch_a = await a.acquire()
        st.fence = fence_op(epoch_a)
        st.submit(st.op_insert_jobs([insert_row(_rec(1))])).result(10)
        b_wins = asyncio.ensure_future(b.acquire())
        stop = asyncio.Event()
        holding = asyncio.ensure_future(a.hold(epoch_a, stop))
        await asyncio.sleep(1.5)  # longer than the lease: renewals keep a in charge
        assert not b_wins.done() and not holding.done()
        info = await b.refresh()
        assert info is not None and info.holder == "a" and info.alive
        # a's session dies (as with kill -9 of its process): b leads after the lease
        # (its renewals stop with it: the lease thread quits with hold, then the session)
        t0 = time.monotonic()
        stop.set()
        await holding
        await a._call(a._drop_session)
        epoch_b = await asyncio.wait_for(b_wins, timeout=10)
        waited = time.monotonic() - t0
        assert epoch_b == epoch_a + 1
        assert waited <= 1.0 + 0.5, waited  # at most the lease (plus a poll)
        # the deposed leader's writes are refused, nothing of them is committed
        late = st.submit(st.op_insert_jobs([insert_row(_rec(2))]))
        assert isinstance(late.exception(10), Fenced)
        assert st.fenced
        st.fence = fence_op(epoch_b)  # (b's store would) commit again
        st.submit(st.op_insert_jobs([insert_row(_rec(3))])).result(10)
        assert {r.id for r in st.load_active()} == {1, 3}
        await b.release()
        await a.close()
        await b.close()

    try:
        asyncio.run(scenario())
    finally:
        st.close()


def test_a_leader_that_cannot_renew_steps_down_before_the_lease_ends(pg_url: str) -> None:
    st = Store(pg_url)
    st.open()
    st.close()

    async def scenario() -> None:
        a, b = _seat(pg_url, "a", lease_s=1.0), _seat(pg_url, "b", lease_s=1.0)
        epoch = await a.acquire()
        stop = asyncio.Event()

        def hang(_epoch: int) -> bool:  # a link that hangs instead of failing
            time.sleep(3)
            return True

        a._renew = hang  # type: ignore[method-assign]
        t0 = time.monotonic()
        why = await a.hold(epoch, stop)
        stepped_down = time.monotonic()
        assert "no lease renewal" in why
        # b gets the lock only once a's session is gone, and takes over only after the
        # lease expired: after a stepped down
        a._pool.submit(a._drop_session)
        await b.acquire()
        took = time.monotonic()
        assert stepped_down - a.renewed_at < 1.0 - 0.2  # a stopped before its lease ended
        assert took - a.renewed_at >= 1.0 - 0.05  # b waited for the lease to end
        assert stepped_down - t0 < 1.0
        await a.close()
        await b.close()

    asyncio.run(scenario())


def test_a_silent_lock_holder_is_ended_once_the_lease_is_long_expired(pg_url: str) -> None:
    """A leader cut off without its connection closing (a partition, a dead host) keeps
    its database session, and the lock, until the server's keepalive gives up: the
    standby ends that session once the lease is over by more than ``lease_s``."""
    st = Store(pg_url)
    st.open()
    st.close()

    async def scenario() -> None:
        a, b = _seat(pg_url, "a", lease_s=1.0), _seat(pg_url, "b", lease_s=1.0)
        epoch_a = await a.acquire()
        t0 = time.monotonic()  # a never renews: its session stays open and silent
        epoch_b = await asyncio.wait_for(b.acquire(), timeout=10)
        took = time.monotonic() - t0
        assert epoch_b == epoch_a + 1
        assert 2.0 - 0.1 <= took <= 2.0 + 1.5, took  # the lease, then lease_s more
        with pytest.raises(sa.exc.OperationalError):  # the server ended a's session
            await a._call(a._read)
        await b.release()
        await a.close()
        await b.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("n", [3])
def test_controllers_starting_together_migrate_once(pg_url: str, n: int) -> None:
    import threading

    errors: list[BaseException] = []

    def start() -> None:
        try:
            s = Store(pg_url)
            s.open()
            s.close()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
