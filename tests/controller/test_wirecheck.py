"""``corral.wirecheck`` on submissions: the lists and maps of strings (argv, env) take a
path-free shortcut when every item is a plain string, and still name the first wrong one."""

from __future__ import annotations

import pytest

from corral.core.model.job import JobSpec
from corral.submission import JobSubmission
from corral.wirecheck import FieldError, check


class _Str(str):
    pass


def _body(spec: dict[str, object] | None = None, **kw: object) -> dict[str, object]:
    body = JobSubmission(spec=JobSpec(name="w"), argv=("a", "b"), env={"A": "1"}).to_json()
    body.update(kw)
    body["spec"].update(spec or {})  # type: ignore[attr-defined]
    return body


def test_plain_strings_pass() -> None:
    check(JobSubmission, _body())
    check(JobSubmission, _body(argv=[_Str("x")], env={_Str("K"): _Str("v")}))  # subclasses
    check(JobSubmission, _body(spec={"uid": 2 ** 63 - 1, "begin_time": 5, "name": _Str("n"),
                                     "nodes_max": None, "time_limit_s": 60}, hold=True))


@pytest.mark.parametrize(("spec", "path", "message"), [
    ({"uid": 2 ** 70}, "spec.uid", "integer out of range (64 bits)"),
    ({"uid": True}, "spec.uid", "expected an integer, got a boolean"),
    ({"uid": None}, "spec.uid", "expected an integer, got null"),
    ({"uid": 1.0}, "spec.uid", "expected an integer, got a number"),
    ({"begin_time": float("inf")}, "spec.begin_time", "expected a finite number"),
    ({"begin_time": 2 ** 64}, "spec.begin_time", "integer out of range (64 bits)"),
    ({"begin_time": "now"}, "spec.begin_time", "expected a number, got a string"),
    ({"exclusive": 1}, "spec.exclusive", "expected true or false, got a number"),
    ({"nodes_max": -2 ** 64}, "spec.nodes_max", "integer out of range (64 bits)"),
    ({"name": 3, "uid": 2 ** 70}, "spec.name", "expected a string, got a number"),
])
def test_plain_fields_still_checked(spec: dict[str, object], path: str, message: str) -> None:
    with pytest.raises(FieldError) as err:
        check(JobSubmission, _body(spec=spec))
    assert (err.value.field, err.value.message) == (path, message)


@pytest.mark.parametrize(("field", "value", "path", "message"), [
    ("argv", ["a", 1, 2], "argv[1]", "expected a string, got a number"),
    ("argv", ("a", None), "argv[1]", "expected a string, got null"),
    ("env", {"A": "1", "B": 2, "C": 3}, "env.B", "expected a string, got a number"),
    ("env", {"A": ["x"]}, "env.A", "expected a string, got a list"),
    ("env", ["A=1"], "env", "expected an object, got a list"),
])
def test_the_first_wrong_item_is_named(field: str, value: object, path: str,
                                       message: str) -> None:
    with pytest.raises(FieldError) as err:
        check(JobSubmission, _body(**{field: value}))
    assert (err.value.field, err.value.message) == (path, message)
