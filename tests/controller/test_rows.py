"""Stored row forms of job records (``corral.controller.rows``)."""

from __future__ import annotations

import dataclasses
import json

from corral.controller.rows import submission_json
from corral.core.model.job import (
    Dependency,
    DependencyKind,
    DependencySpec,
    JobSpec,
    TaskGroup,
)
from corral.submission import JobSubmission


def test_submission_json_is_the_json_of_asdict() -> None:
    spec = JobSpec(
        name="rich", user="alice", uid=1000, gid=1000, account="phys", partitions=("a", "b"),
        gres=(("gpu", 2),), licenses=(("matlab", 1),), time_limit_s=90,
        task_groups=(TaskGroup(name="ps", replicas=2, gpu_type="h200"),),
        dependency=DependencySpec(items=(Dependency(DependencyKind.AFTEROK, (3, 4), 60, 2),),
                                  any_of=True))
    sub = JobSubmission(spec=spec, script="#!/bin/sh\necho é\n", argv=("x", "y"),
                        workdir="/tmp", env={"A": "1", "LANG": "C.UTF-8", "U": "ü"},
                        stdout="o-%j", array="1-3%2", extra={"submit_host": "h"})
    expected = json.dumps(dataclasses.asdict(sub), separators=(",", ":"))
    assert submission_json(sub) == expected
    assert JobSubmission.from_json(json.loads(submission_json(sub))) == sub
    plain = JobSubmission(spec=JobSpec(name="p"), argv=("true",))
    assert submission_json(plain) == json.dumps(dataclasses.asdict(plain),
                                                separators=(",", ":"))


def _shape(v: object) -> object:
    """A value with the type of every part spelled out (``==`` takes a tuple for a list)."""
    if isinstance(v, dict):
        return ("dict", [(k, _shape(x)) for k, x in v.items()])
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, [_shape(x) for x in v])
    return (type(v).__name__, v)


def test_to_json_is_asdict() -> None:
    """``JobSubmission.to_json`` (one pass) gives what ``dataclasses.asdict`` gives: the
    same keys in the same order, tuples as tuples, enum members, fresh containers."""
    spec = JobSpec(
        name="rich", user="alice", uid=1000, account="phys", partitions=("a", "b"),
        gres=(("gpu", 2),), licenses=(("matlab", 1),), begin_time=5.5,
        task_groups=(TaskGroup(name="ps", replicas=2, gpu_type="h200"),),
        dependency=DependencySpec(items=(Dependency(DependencyKind.AFTEROK, (3, 4), 60, 2),),
                                  any_of=True))
    sub = JobSubmission(spec=spec, script="#!/bin/sh\n", argv=("x", "y"), workdir="/tmp",
                        env={"A": "1", "U": "ü"}, stdout="o-%j", array="1-3%2", hold=True,
                        extra={"submit_host": "h"})
    for s in (sub, JobSubmission(spec=JobSpec(name="p"), argv=("true",))):
        out, ref = s.to_json(), dataclasses.asdict(s)
        assert _shape(out) == _shape(ref)
        assert out["env"] is not s.env and out["extra"] is not s.extra
    kind = sub.to_json()["spec"]["dependency"]["items"][0]["kind"]
    assert kind is DependencyKind.AFTEROK
