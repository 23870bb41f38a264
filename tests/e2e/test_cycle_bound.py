"""A bounded cycle (``[controller] cycle_max_starts``): a burst is split over cycles.

Ten held one-CPU jobs released at once on a 16-CPU node, at most 3 starts a cycle, and a
periodic tick far away (60 s): each cycle that reaches the cap runs the next one at once,
so all ten run within seconds, over at least four cycles. Without the re-trigger the
jobs after the first three would wait for the tick.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import TEST_CONFIG, Cluster, wait_for

CONFIG = TEST_CONFIG.replace("tick_s = 1", "tick_s = 60\ncycle_max_starts = 3")


@pytest.fixture(scope="module")
def bounded() -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="corral-bound-"))
    c = Cluster(root, CONFIG)
    c.up()
    try:
        yield c
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


def test_a_released_burst_starts_over_bounded_cycles(bounded: Cluster) -> None:
    c = bounded
    ids = [c.client.submit(c.submission("sleep 60", cpus_per_task=1, hold=True))[0]
           for _ in range(10)]
    before = c.client.ping()["cycles"]
    c.client.release(ids)
    t0 = time.monotonic()

    def all_running() -> bool:
        return all(c.job(j)["state"] == "RUNNING" for j in ids)

    wait_for(all_running, timeout=20, what="all ten jobs running")
    assert time.monotonic() - t0 < 20
    assert c.client.ping()["cycles"] - before >= 4  # 3 + 3 + 3 + 1
    c.client.cancel(ids)
    for j in ids:
        c.wait_done(j)
