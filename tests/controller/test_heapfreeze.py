"""The controller's collector policy (``controller.heapfreeze``) on this interpreter's real
collector: long-lived objects are frozen on a schedule, cycles are still freed by the full
pass, and a stopped controller leaves nothing frozen."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from corral.controller.heapfreeze import HeapFreezer


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture(autouse=True)
def _thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_objects_are_frozen_on_schedule_and_thawed_at_close() -> None:
    heap = HeapFreezer(freeze_every_s=30, full_every_s=3600)
    heap.tick(1000.0)  # the first tick freezes what the controller loaded
    first = gc.get_freeze_count()
    assert first > 0
    kept = [Node() for _ in range(5000)]  # long-lived: frozen at the next freeze only
    heap.tick(1010.0)
    assert gc.get_freeze_count() == first
    heap.tick(1030.0)
    assert gc.get_freeze_count() >= first + 5000
    heap.close()
    assert gc.get_freeze_count() == 0
    assert kept


def test_a_cycle_that_dies_frozen_is_freed_by_the_full_pass() -> None:
    heap = HeapFreezer(freeze_every_s=30, full_every_s=600)
    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    heap.tick(0.0)  # frozen with the rest of the heap
    del a, b
    gc.collect()  # a plain collection does not look at frozen objects
    assert gone() is not None
    heap.tick(300.0)
    assert gone() is not None
    heap.tick(600.0)  # the full pass: unfreeze, collect, freeze again
    assert gone() is None
    assert heap.full_pause_s > 0 and gc.get_freeze_count() > 0
    heap.close()


def test_zero_turns_it_off() -> None:
    heap = HeapFreezer(freeze_every_s=0, full_every_s=3600)
    for t in (0.0, 100.0, 7200.0):
        heap.tick(t)
    assert gc.get_freeze_count() == 0
    heap.close()
