"""The controller's garbage-collector policy: the long-lived heap is frozen, so a collection
costs what changed lately, not what is queued.

Why: CPython's cyclic collector runs a *full* collection (every tracked object) once the
objects that survived younger collections exceed a quarter of the long-lived heap. A
controller with 100,000 queued jobs holds about 1.4 million tracked objects; each full
collection took 0.55-0.85 s here (measured with ``gc.callbacks``), stopping the event loop
in the middle of a scheduling cycle, a submit or an ``squeue``. Most of those objects (job
records, their specs, the cached API views) live until their job is pruned.

Algorithm (``tick(now)``, from the controller's ticker):

- every ``freeze_every_s`` (5 s by default): a young collection (generations 0 and 1:
  what survives it is long-lived), then ``gc.freeze()``: everything tracked moves to the
  permanent generation, which collections skip. Later collections see only objects created since.
- every ``full_every_s`` (600 s by default): ``gc.unfreeze()``, one full collection,
  ``gc.freeze()``: the only full pass, which frees cyclic garbage among frozen objects (a
  cycle that became garbage while frozen is not collected before that).

Invariants: garbage without reference cycles is freed at once, frozen or not (reference
counting); cyclic garbage lives at most ``full_every_s``; ``close()`` unfreezes, so a
controller stopped inside a longer-lived process (tests, ``corral up``) leaves the
collector as it found it. ``freeze_every_s = 0`` turns the policy off.
Reference: the ``gc.freeze`` documentation (Python 3.7+), which suggests it for
long-lived heaps.
"""

from __future__ import annotations

import gc
import logging
import time

log = logging.getLogger("corral.controller")


class HeapFreezer:
    def __init__(self, freeze_every_s: float, full_every_s: float) -> None:
        self.freeze_every_s = freeze_every_s
        self.full_every_s = full_every_s
        self._last_freeze: float | None = None
        self._last_full: float | None = None
        self.full_pause_s = 0.0  # the last full collection's length (metrics, logs)

    @property
    def enabled(self) -> bool:
        return self.freeze_every_s > 0

    def tick(self, now: float) -> None:
        if not self.enabled:
            return
        if self._last_full is None:
            self._last_full = now
        if self.full_every_s > 0 and now - self._last_full >= self.full_every_s:
            self._last_full = self._last_freeze = now
            t0 = time.perf_counter()
            gc.unfreeze()
            gc.collect()
            gc.freeze()
            self.full_pause_s = time.perf_counter() - t0
            log.info("full garbage collection: %.3f s, %d objects frozen",
                     self.full_pause_s, gc.get_freeze_count())
            return
        if self._last_freeze is None or now - self._last_freeze >= self.freeze_every_s:
            self._last_freeze = now
            gc.collect(1)
            gc.freeze()

    def close(self) -> None:
        if self.enabled and self._last_freeze is not None:
            gc.unfreeze()
        self._last_freeze = None
