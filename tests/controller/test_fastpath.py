"""Hot-path helpers of the controller: the corked transport (one write per response) and
the direct copy that applies the caller's identity. (The fast paths themselves run in every
end-to-end test: submit, query and ping go through them on the Unix socket.)"""

from __future__ import annotations

import dataclasses
import os

import pytest

from corral.controller.auth import Identity
from corral.controller.intake import _replace, apply_identity
from corral.controller.server import CorkedTransport
from corral.core.model.job import JobSpec
from corral.submission import JobSubmission


class _Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed, "write after close"
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


def test_corked_writes_leave_as_one() -> None:
    t = _Transport()
    c = CorkedTransport(t)
    c.write(b"a")
    assert t.writes == [b"a"]  # not corked: straight through
    c.cork()
    c.write(b"HTTP/1.1 200 OK\r\n\r\n")
    c.write(bytearray(b"{}"))
    assert t.writes == [b"a"]
    c.uncork()
    assert t.writes == [b"a", b"HTTP/1.1 200 OK\r\n\r\n{}"]
    c.uncork()  # nothing held: no empty write
    assert len(t.writes) == 2
    assert c.get_extra_info("peername") == "info:peername"


def test_close_sends_what_is_held_first() -> None:
    t = _Transport()
    c = CorkedTransport(t)
    c.cork()
    c.write(b"last words")
    c.close()
    assert t.writes == [b"last words"] and t.closed


def test_identity_copy_equals_dataclasses_replace() -> None:
    spec = JobSpec(name="x", user="someone", uid=5, partitions=("p",), comment="c")
    sub = JobSubmission(spec=spec, argv=("true",), workdir="/tmp", env={"A": "1"})
    fast = _replace(sub, spec=_replace(spec, user="u", uid=7, gid=8, account="a"))
    slow = dataclasses.replace(sub, spec=dataclasses.replace(spec, user="u", uid=7, gid=8,
                                                             account="a"))
    assert fast == slow and hash(fast.spec) == hash(slow.spec)
    assert type(fast) is JobSubmission and fast.spec.user == "u" and spec.user == "someone"
    with pytest.raises(TypeError):
        _replace(spec, no_such_field=1)
    who = Identity("me", os.geteuid(), os.getegid())
    from corral.config.schema import ClusterConfig

    out = apply_identity(dataclasses.replace(sub, spec=dataclasses.replace(spec, user="")),
                         who, ClusterConfig())
    assert (out.spec.user, out.spec.uid, out.argv, out.env) == ("me", who.uid, ("true",),
                                                                {"A": "1"})


def test_first_of_returns_at_the_first_done_and_leaves_no_callback() -> None:
    import asyncio

    from corral.shims.fastpath import first_of

    async def main() -> None:
        loop = asyncio.get_running_loop()
        work, end = loop.create_future(), loop.create_future()
        waiting = asyncio.ensure_future(first_of(work, end))
        await asyncio.sleep(0)
        assert not waiting.done()  # neither is done: it waits
        end.set_result(None)  # the term ended first: the work goes on, unwatched
        await asyncio.wait_for(waiting, 5)
        assert not work.done()
        assert not work._callbacks  # type: ignore[attr-defined]  # no callback left on it
        work.set_result(1)
        await first_of(work, loop.create_future())  # done already: returns at once
        later = loop.create_future()
        waiting = asyncio.ensure_future(first_of(later, end))  # end is done: at once
        await asyncio.wait_for(waiting, 5)
        waiting = asyncio.ensure_future(first_of(later, loop.create_future()))
        await asyncio.sleep(0)
        later.set_result(2)
        await asyncio.wait_for(waiting, 5)

    asyncio.run(main())
