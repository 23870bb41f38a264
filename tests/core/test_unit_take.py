"""``Placer.unit_take`` (one step) places and takes exactly what ``unit_fits`` followed by
``commit`` does, on random one-core clusters and random partly used pools."""

from __future__ import annotations

import random

from corral.core.config import PlacementMode, SchedulerConfig
from corral.core.nodes import iter_bits, lowest_bits, node_table
from corral.core.placement import Placer
from corral.core.pool import NodeUse, Pool
from corral.core.shape import Shape, shape_of
from corral.sim.cluster import from_header


def _pool_state(p: Pool) -> tuple[object, ...]:
    return (p.core_mask, p.cores_free, p.mem_free, p.ge_cores, p.idle, p.free_total)


def _take_both_ways(a_placer: Placer, b_placer: Placer, shape: Shape, part_name: str,
                    base: Pool) -> bool:
    """``unit_fits`` + ``commit`` on one copy of ``base``, ``unit_take`` on another: the
    same allocation (or both refuse) and the same pool after. True when it placed."""
    a, b = base.copy(), base.copy()
    plan_a = a_placer.unit_plan(shape, part_name, a)
    plan_b = b_placer.unit_plan(shape, part_name, b)
    assert plan_a is not None and plan_a == plan_b
    chosen = a_placer.unit_fits(shape, a, plan_a[0], plan_a[1])
    want = None if chosen is None else a_placer.commit(shape, part_name, a, chosen)
    got = b_placer.unit_take(shape, part_name, b, plan_b[0], plan_b[1])
    assert (want is None) == (got is None)
    assert _pool_state(a) == _pool_state(b)
    if want is None or got is None:
        return False
    assert want.allocation == got.allocation and want.uses == got.uses
    return True


def test_unit_take_equals_unit_fits_then_commit() -> None:
    rng = random.Random(7)
    config = SchedulerConfig()
    cl = from_header(16, 64, machine="cores")
    table, up = node_table(cl.nodes, cl.partitions)
    part = cl.partitions[0]
    compared = placed = 0
    for mode in (PlacementMode.PACK, PlacementMode.SPREAD):
        a_placer, b_placer = Placer(table, mode), Placer(table, mode)
        for _ in range(300):
            base = Pool(table, up)
            for i in rng.sample(range(64), rng.randrange(0, 64)):  # nodes in use
                base.take_units((NodeUse(i, 1, base.mem_free[i] // 2, 0, ()),), 1 << i)
            procs = rng.choice([1, 2, 3, 8, 17, 40, 64])
            shape = shape_of(cl.spec_for(procs, 3600, "u", "g"), part, config)
            placed += _take_both_ways(a_placer, b_placer, shape, part.name, base)
            compared += 1
    assert compared == 600 and 0 < placed < compared  # both outcomes were exercised



def test_unit_take_with_memory_held_without_cores() -> None:
    """Suspended jobs keep their memory but give their core back (``Pool.loose_mem``):
    ``unit_take`` must still refuse nodes whose free memory is too small, like
    ``unit_fits``."""
    rng = random.Random(11)
    config = SchedulerConfig()
    cl = from_header(16, 32, machine="cores")
    table, up = node_table(cl.nodes, cl.partitions)
    part = cl.partitions[0]
    a_placer, b_placer = Placer(table, PlacementMode.PACK), Placer(table, PlacementMode.PACK)
    refused = placed = 0
    for _ in range(300):
        base = Pool(table, up)
        for i in rng.sample(range(32), rng.randrange(0, 8)):  # suspended: memory only
            base.take(NodeUse(i, 1, base.mem_free[i] - rng.randrange(0, 2), 0, ()),
                      cores=False)
        assert base.loose_mem or base.mem_free == list(table.mem)
        procs = rng.choice([1, 2, 4, 8, 16, 32])
        shape = shape_of(cl.spec_for(procs, 3600, "u", "g"), part, config)
        if _take_both_ways(a_placer, b_placer, shape, part.name, base):
            placed += 1
        else:
            refused += 1
    assert placed and refused


def test_lowest_bits_equals_the_bit_walk() -> None:
    rng = random.Random(5)
    for _ in range(3000):
        n = rng.choice([1, 8, 64, 240, 257, 600, 8192])
        m = rng.getrandbits(n)
        if rng.random() < 0.3:
            m &= rng.getrandbits(n) & rng.getrandbits(n)
        k = rng.randrange(0, 300)
        assert lowest_bits(m, k) == iter_bits(m)[:k]
