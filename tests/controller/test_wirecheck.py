"""``corral.wirecheck`` on submissions: the lists and maps of strings (argv, env) take a
path-free shortcut when every item is a plain string, and still name the first wrong one."""

from __future__ import annotations

import pytest

from corral.core.model.job import JobSpec
from corral.submission import JobSubmission
from corral.wirecheck import FieldError, check


class _Str(str):
    pass


def _body(**kw: object) -> dict[str, object]:
    body = JobSubmission(spec=JobSpec(name="w"), argv=("a", "b"), env={"A": "1"}).to_json()
    body.update(kw)
    return body


def test_plain_strings_pass() -> None:
    check(JobSubmission, _body())
    check(JobSubmission, _body(argv=[_Str("x")], env={_Str("K"): _Str("v")}))  # subclasses


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
