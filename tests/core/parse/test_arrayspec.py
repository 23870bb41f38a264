from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.core.parse.arrayspec import ArraySpec, format_array, parse_array
from corral.core.parse.errors import ParseError


@pytest.mark.parametrize(
    ("text", "indices", "limit"),
    [
        ("1-10:2%4", (1, 3, 5, 7, 9), 4),
        ("0-3", (0, 1, 2, 3), None),
        ("5", (5,), None),
        ("0,6,16-18", (0, 6, 16, 17, 18), None),
        ("1,3,5%2", (1, 3, 5), 2),
        ("3-1000:500", (3, 503), None),
        ("4,1-3,2", (1, 2, 3, 4), None),  # de-duplicated and sorted, as Slurm's bitmap
    ],
)
def test_parse_array(text: str, indices: tuple[int, ...], limit: int | None) -> None:
    assert parse_array(text) == ArraySpec(indices, limit)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("x-y", "index 'x'"),
        ("", "empty specification"),
        ("1-", "missing end of range"),
        ("5-1", "range '5-1' runs backwards"),
        ("1-10:0", "step in '1-10:0' must be at least 1"),
        ("3:2", "a step needs a range"),
        ("1-10%0", "'%' limit must be at least 1"),
        ("1-10%", "missing limit"),
        ("%4", "no indices"),
        ("1,,2", "missing index"),
        ("-1", "missing index"),
    ],
)
def test_parse_array_errors(text: str, fragment: str) -> None:
    with pytest.raises(ParseError) as ei:
        parse_array(text)
    msg = str(ei.value)
    assert msg.startswith("Invalid job array specification"), msg
    assert fragment in msg


def test_max_array_size_bounds_the_index_like_slurm() -> None:
    # Slurm 22.05 rejects --array=1-5000 with MaxArraySize=1001 (compat err_sbatch_array_too_big)
    with pytest.raises(ParseError, match="Invalid job array specification"):
        parse_array("1-5000", max_array_size=1001)
    assert parse_array("0-1000", max_array_size=1001).indices[-1] == 1000
    with pytest.raises(ParseError, match="not below the maximum array size 1001"):
        parse_array("1001", max_array_size=1001)


def test_unbounded_spec_is_still_refused_when_absurd() -> None:
    with pytest.raises(ParseError, match="more than any cluster"):
        parse_array("0-99999999999")


def test_format_array() -> None:
    assert format_array((3, 4, 5, 6), 2) == "3-6%2"
    assert format_array([1, 3, 5, 6, 7]) == "1,3,5-7"


@given(st.sets(st.integers(0, 300), min_size=1), st.one_of(st.none(), st.integers(1, 50)))
def test_format_parse_round_trip(indices: set[int], limit: int | None) -> None:
    spec = parse_array(format_array(sorted(indices), limit))
    assert spec == ArraySpec(tuple(sorted(indices)), limit)
