"""``Placer.unit_take`` (one step) places and takes exactly what ``unit_fits`` followed by
``commit`` does, on random one-core clusters and random partly used pools."""

from __future__ import annotations

import random

from corral.core.config import PlacementMode, SchedulerConfig
from corral.core.nodes import node_table
from corral.core.placement import Placer
from corral.core.pool import NodeUse, Pool
from corral.core.shape import shape_of
from corral.sim.cluster import from_header


def _pool_state(p: Pool) -> tuple[object, ...]:
    return (p.core_mask, p.cores_free, p.mem_free, p.ge_cores, p.idle, p.free_total)


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
            a, b = base.copy(), base.copy()
            plan_a = a_placer.unit_plan(shape, part.name, a)
            plan_b = b_placer.unit_plan(shape, part.name, b)
            assert plan_a is not None and plan_a == plan_b
            chosen = a_placer.unit_fits(shape, a, plan_a[0], plan_a[1])
            want = None if chosen is None else a_placer.commit(shape, part.name, a, chosen)
            got = b_placer.unit_take(shape, part.name, b, plan_b[0], plan_b[1])
            assert (want is None) == (got is None)
            if want is not None and got is not None:
                assert want.allocation == got.allocation
                assert want.uses == got.uses
                placed += 1
            assert _pool_state(a) == _pool_state(b)
            compared += 1
    assert compared == 600 and 0 < placed < compared  # both outcomes were exercised

