"""The hand-written constructors of the records made by the hundred thousand (``Job``,
``Start``, ``CycleStats``, ``CycleResult``: fields stored through their slots) are the
dataclass constructors: the same parameters, order and defaults, every field stored where
it belongs, default factories run per object, and the records still frozen."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from corral.core.decisions import CycleResult, CycleStats, Start
from corral.core.model.job import Allocation, Job, JobSpec, JobState

CLASSES: list[type[Any]] = [Job, Start, CycleStats, CycleResult]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_parameters_are_the_fields_in_order_with_their_defaults(cls: type[Any]) -> None:
    fields = dataclasses.fields(cls)
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    assert [p.name for p in params] == [f.name for f in fields]
    for p, f in zip(params, fields, strict=True):
        if f.default_factory is not dataclasses.MISSING:
            assert p.default is None, f.name  # None stands for "make a new one"
            assert getattr(cls(), f.name) == f.default_factory()
            continue
        want = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        assert p.default == want, f.name


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_field_is_stored_by_position_and_by_keyword(cls: type[Any]) -> None:
    names = [f.name for f in dataclasses.fields(cls)]
    values = [object() for _ in names]  # a distinct marker per field
    by_position = cls(*values)
    by_keyword = cls(**dict(zip(names, values, strict=True)))
    for name, value in zip(names, values, strict=True):
        assert getattr(by_position, name) is value, name
        assert getattr(by_keyword, name) is value, name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(by_position, names[0], 1)


def test_records_equal_hash_and_replace_as_dataclasses() -> None:
    spec = JobSpec()
    job = Job(1, spec, 2.0)
    assert job.state is JobState.PENDING and job.extra == () and job.restarts == 0
    moved = dataclasses.replace(job, state=JobState.RUNNING, start_time=3.0)
    assert moved == Job(1, spec, 2.0, JobState.RUNNING, 3.0)
    assert hash(moved) == hash(Job(1, spec, 2.0, JobState.RUNNING, 3.0))
    start = Start(1, Allocation("batch", ()), 60)
    assert start == dataclasses.replace(start) and start.backfilled is False
    one, two = CycleResult(), CycleResult()
    assert one == two and one.pending is not two.pending
    assert one.stats == CycleStats() and one.stats.started == 0
    with pytest.raises(TypeError):
        Job(1, spec)  # type: ignore[call-arg]
