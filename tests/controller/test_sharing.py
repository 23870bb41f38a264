"""Jobs that hold the same environment or submission text share one copy."""

from __future__ import annotations

import json

from corral.controller.sharing import EnvPool, SubmissionPool
from corral.core.model.job import JobSpec
from corral.submission import JobSubmission


def _sub(env: dict[str, str], name: str = "a") -> JobSubmission:
    return JobSubmission(spec=JobSpec(name=name), script="#!/bin/sh\ntrue\n", env=env)


def test_equal_environments_become_one_dict_and_the_callers_stay_theirs() -> None:
    pool = EnvPool()
    mine = {"PATH": "/usr/bin", "HOME": "/home/a"}
    a = pool.share_in(_sub(mine))
    b = pool.share_in(_sub(dict(mine), name="b"))
    assert a.env == mine and a.env is b.env and a.env is not mine
    mine["PATH"] = "/changed"  # the caller's dict is not the pool's
    assert a.env["PATH"] == "/usr/bin"
    c = pool.share_in(_sub({"PATH": "/other"}))
    assert c.env is not a.env and c.env == {"PATH": "/other"}
    assert pool.share({}) == {}
    damaged: list[str] = ["not", "a", "dict"]  # as a damaged stored record may hold
    assert pool.share(damaged) is damaged  # type: ignore[arg-type]
    odd = {"A": ["unhashable"]}
    assert pool.share(odd) is odd  # type: ignore[arg-type]


def test_the_pool_is_bounded_least_recently_used_first() -> None:
    pool = EnvPool(max_entries=2)
    first = pool.share({"A": "1"})
    pool.share({"B": "2"})
    assert pool.share({"A": "1"}) is first  # used again: kept
    pool.share({"C": "3"})  # drops B, the least recently used
    assert pool.share({"A": "1"}) is first
    assert len(pool._pool) == 2


def test_stored_submissions_of_the_same_text_parse_once() -> None:
    subs = SubmissionPool()
    text = json.dumps(_sub({"X": "1"}).to_json())
    one, two = subs.parse(text), subs.parse(text)
    assert one is two and one == JobSubmission.from_json(json.loads(text))
    other = subs.parse(json.dumps(_sub({"X": "1"}, name="other").to_json()))
    assert other is not one and other.spec.name == "other" and other.env is one.env


def test_equal_specs_become_one_object() -> None:
    pool = EnvPool()
    a = pool.share_in(_sub({"X": "1"}))
    b = pool.share_in(_sub({"X": "1"}))
    c = pool.share_in(_sub({"X": "1"}, name="other"))
    assert a.spec is b.spec and a.spec == JobSpec(name="a")
    assert c.spec is not a.spec and c.spec.name == "other"
