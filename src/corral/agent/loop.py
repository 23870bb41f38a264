"""The event loop the daemons (controller, agent) run on.

uvloop's loop where it is installed: its loop, tasks, futures and socket transports are
compiled (libuv), so every request, commit and agent frame costs less CPU than with
asyncio's pure-Python selector loop (the controller: about 7% less CPU per job in a
sequential drain on this machine). Without uvloop, or with ``CORRAL_UVLOOP=0``, asyncio's
own loop: behaviour is the same either way.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """A ``loop_factory`` for ``asyncio.Runner`` (``None``: asyncio's default loop)."""
    if os.environ.get("CORRAL_UVLOOP", "1") == "0":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """``asyncio.run(main())`` on the daemons' event loop."""
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        runner.run(main())
