from __future__ import annotations

import pytest

from corral.core.model.job import Dependency, DependencyKind, DependencySpec
from corral.core.parse.dependency import format_dependency, parse_dependency
from corral.core.parse.errors import ParseError

K = DependencyKind


def test_all_of_one_item_per_job() -> None:
    spec = parse_dependency("afterok:12:13,afterany:14")
    assert spec == DependencySpec(
        (Dependency(K.AFTEROK, (12,)), Dependency(K.AFTEROK, (13,)),
         Dependency(K.AFTERANY, (14,))),
        any_of=False,
    )


def test_any_of_with_delay_and_singleton() -> None:
    spec = parse_dependency("after:12+5?singleton")
    assert spec.any_of
    assert spec.items == (Dependency(K.AFTER, (12,), delay_s=300), Dependency(K.SINGLETON))


def test_per_job_delays() -> None:
    spec = parse_dependency("after:1+2:3")
    assert spec.items == (Dependency(K.AFTER, (1,), 120), Dependency(K.AFTER, (3,), 0))


def test_array_task_references() -> None:
    spec = parse_dependency("afterok:123_4:123_*:9")
    assert spec.items == (
        Dependency(K.AFTEROK, (123,), array_task_id=4),
        Dependency(K.AFTEROK, (123,)),
        Dependency(K.AFTEROK, (9,)),
    )


def test_legacy_form_without_type_is_afterany() -> None:
    assert parse_dependency("12:13").items == (
        Dependency(K.AFTERANY, (12,)), Dependency(K.AFTERANY, (13,)))


@pytest.mark.parametrize("kind", ["after", "afterany", "afterok", "afternotok", "aftercorr"])
def test_every_kind(kind: str) -> None:
    assert parse_dependency(f"{kind}:7").items == (Dependency(K(kind), (7,)),)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("foo:1", "unknown dependency type 'foo'"),
        ("afterok", "afterok needs at least one job id"),
        ("afterok:", "afterok needs at least one job id"),
        ("afterok:abc", "job id 'abc'"),
        ("afterok:0", "job id '0'"),
        ("afterok:1,", "empty condition"),
        ("afterok:1,afterany:2?afterok:3", "cannot be mixed"),
        ("singleton:3", "singleton takes no job ids"),
        ("after:1+x", "delay 'x'"),
        ("afterok:1_x", "array task 'x'"),
        ("aftercorr:1_2", "aftercorr takes whole array jobs"),
        ("afterburstbuffer:1", "not supported"),
        ("afterok:12:", "missing job id"),
        ("", "empty dependency"),
    ],
)
def test_errors_carry_slurms_message(text: str, fragment: str) -> None:
    with pytest.raises(ParseError) as ei:
        parse_dependency(text)
    assert str(ei.value).startswith("Job dependency problem")
    assert fragment in str(ei.value)


@pytest.mark.parametrize(
    "text",
    ["afterok:12:13,afterany:14", "after:12+5?singleton", "afterok:123_4:9",
     "singleton", "afterany:1,singleton,afterany:2"],
)
def test_format_round_trip(text: str) -> None:
    spec = parse_dependency(text)
    assert format_dependency(spec) == text
    assert parse_dependency(format_dependency(spec)) == spec


def test_task_references_survive_the_submission_wire_form() -> None:
    from corral.core.model import JobSpec
    from corral.submission import JobSubmission

    sub = JobSubmission(JobSpec(dependency=parse_dependency("afterok:12_3?after:4+2")))
    assert JobSubmission.from_json(sub.to_json()) == sub
