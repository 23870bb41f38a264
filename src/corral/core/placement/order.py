"""Candidate node orders: best fit (pack), least loaded (spread), and per-switch grouping.

Orders are generators over a candidate bitmask, driven by the pool's ``ge_cores`` summary
masks, so a job that needs few nodes looks at few nodes:

* ``pack_order``: nodes with the fewest free cores that still fit first (best fit), then
  lowest index (lowest weight). Nodes with GPUs come last for jobs that want none, so CPU
  jobs do not strand GPUs.
* ``spread_order``: nodes with the most free cores first (least loaded).
"""

from __future__ import annotations

from collections.abc import Iterator

from corral.core.pool import Pool


def _bits(mask: int) -> Iterator[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def pack_order(pool: Pool, mask: int, min_cores: int, avoid: int = 0) -> Iterator[int]:
    """Best fit: ascending free cores (from ``min_cores``), lowest index first.

    Nodes in ``avoid`` (e.g. GPU nodes for a CPU-only job) come after all others.
    """
    ge = pool.ge_cores
    top = len(ge) - 1
    for part in ((mask & ~avoid, mask & avoid) if avoid & mask else (mask,)):
        rest = part & ge[min(max(min_cores, 0), top)]
        c = max(min_cores, 0)
        while rest and c < top:
            bucket = rest & ~ge[c + 1]
            if bucket:
                yield from _bits(bucket)
                rest ^= bucket
            c += 1
        if rest:
            yield from _bits(rest)


def spread_order(pool: Pool, mask: int, min_cores: int, avoid: int = 0) -> Iterator[int]:
    """Least loaded: descending free cores, lowest index first; ``avoid`` nodes last."""
    ge = pool.ge_cores
    top = len(ge) - 1
    lo = min(max(min_cores, 0), top)
    for part in ((mask & ~avoid, mask & avoid) if avoid & mask else (mask,)):
        rest = part & ge[lo]
        c = top
        while rest and c >= lo:
            bucket = rest & ge[c]
            if bucket:
                yield from _bits(bucket)
                rest ^= bucket
            c -= 1
