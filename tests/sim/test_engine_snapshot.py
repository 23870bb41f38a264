"""The engine's cheap snapshot maker builds exactly what ``ClusterSnapshot(**fields)``
builds (equal, frozen, no fields missing or extra)."""

from __future__ import annotations

import dataclasses

import pytest

from corral.core import ClusterSnapshot
from corral.core.model.job import Job
from corral.sim.cluster import from_header
from corral.sim.engine import _snapshot_factory


def test_snapshot_factory_equals_the_constructor() -> None:
    cl = from_header(4, 8, machine="cores")
    template = ClusterSnapshot(nodes=cl.nodes, partitions=cl.partitions, qos=cl.qos)
    make = _snapshot_factory(template)
    spec = cl.spec_for(2, 60, "u1", "g1")
    fields = dict(vars(template))
    fields.update(pending=(Job(id=1, spec=spec, submit_time=0.0),), running=(),
                  generation=7, reserved=(1,))
    got = make(fields)
    want = ClusterSnapshot(**fields)
    assert got == want
    assert type(got) is ClusterSnapshot
    assert {f.name for f in dataclasses.fields(got)} == set(vars(got))
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.generation = 8  # type: ignore[misc]
    fields["generation"] = 9  # the next cycle's map does not reach back into this one
    assert got.generation == 7
