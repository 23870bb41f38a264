"""The replay builds job records positionally (``corral.sim.engine``): the field order it
assumes must be ``Job``'s, and a record built that way equals one built by keyword."""

from __future__ import annotations

import dataclasses

from corral.core.model.job import Allocation, HoldKind, Job, JobSpec, JobState
from corral.sim.engine import RUNNING_FIELDS


def test_running_fields_are_the_leading_fields_of_job() -> None:
    names = tuple(f.name for f in dataclasses.fields(Job))
    assert names[:len(RUNNING_FIELDS)] == RUNNING_FIELDS


def test_a_positional_running_record_equals_the_keyword_one() -> None:
    spec = JobSpec()
    alloc = Allocation("batch", ())
    by_position = Job(7, spec, 3.0, JobState.RUNNING, 5.0, None, HoldKind.NONE, alloc, 60,
                      None, 0, None, None, None, 2, None, "batch")
    by_keyword = Job(id=7, spec=spec, submit_time=3.0, state=JobState.RUNNING,
                     start_time=5.0, allocation=alloc, time_limit_s=60, restarts=2,
                     partition="batch")
    assert by_position == by_keyword
