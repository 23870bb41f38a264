from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.core.parse.errors import ParseError
from corral.core.parse.timefmt import (
    format_pbs_walltime_s,
    format_squeue_time_s,
    format_time_s,
    parse_pbs_walltime_s,
    parse_time_limit_s,
    parse_time_s,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5", 300),  # M
        ("90", 5400),
        ("5:30", 330),  # M:S
        ("1:02:03", 3723),  # H:M:S
        ("2-0", 2 * 86400),  # D-H
        ("1-2", 86400 + 7200),
        ("1-2:3", 86400 + 7200 + 180),  # D-H:M
        ("1-02:03:04", 93784),  # D-H:M:S
        ("0:90", 90),
        ("0", 0),
        (" 10 ", 600),
        ("UNLIMITED", None),
        ("unlimited", None),
        ("INFINITE", None),
        ("-1", None),
    ],
)
def test_parse_time(text: str, seconds: int | None) -> None:
    assert parse_time_s(text) == seconds


def test_time_zero_is_unlimited_for_limits() -> None:
    assert parse_time_s("0") == 0
    assert parse_time_limit_s("0") is None
    assert parse_time_limit_s("0:30") == 30


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("abc", "'abc' is not a non-negative whole number"),
        ("1:2:3:4:5", "too many ':'-separated fields"),
        ("1-2:3:4:5", "too many ':'-separated fields"),
        ("", "empty time"),
        ("1-", "nothing after 'days-'"),
        ("x-1", "days 'x'"),
        ("1:", "'' is not"),
        ("-5", "days ''"),
        ("1.5", "'1.5' is not"),
    ],
)
def test_parse_time_errors(text: str, fragment: str) -> None:
    with pytest.raises(ParseError) as ei:
        parse_time_s(text)
    assert fragment in str(ei.value)
    assert ei.value.slurm_message == "Invalid --time specification"


@pytest.mark.parametrize(
    ("seconds", "scontrol", "squeue"),
    [
        (0, "00:00:00", "0:00"),
        (89, "00:01:29", "1:29"),
        (300, "00:05:00", "5:00"),
        (3723, "01:02:03", "1:02:03"),
        (93784, "1-02:03:04", "1-02:03:04"),
        (10 * 86400, "10-00:00:00", "10-00:00:00"),
        (None, "UNLIMITED", "UNLIMITED"),
        (-1, "INVALID", "INVALID"),
    ],
)
def test_formats_match_slurm_outputs(seconds: int | None, scontrol: str, squeue: str) -> None:
    # shapes from compat/slurm-22.05: scontrol RunTime=00:01:29, squeue TIME 1:29 / 5:00
    assert format_time_s(seconds) == scontrol
    assert format_squeue_time_s(seconds) == squeue


def test_sinfo_unlimited_spelling() -> None:
    assert format_time_s(None, unlimited="infinite") == "infinite"


@given(st.integers(0, 400 * 86400))
def test_time_format_parse_round_trip(seconds: int) -> None:
    assert parse_time_s(format_time_s(seconds)) == seconds
    assert parse_time_s(format_squeue_time_s(seconds)) == seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("01:30:00", 5400), ("3600", 3600), ("10:00", 600), ("1:00:00:00", 86400),
     ("100:00:00", 360000), ("59.2", 60), ("0", 0)],
)
def test_pbs_walltime(text: str, seconds: int) -> None:
    assert parse_pbs_walltime_s(text) == seconds


@pytest.mark.parametrize("text", ["", "1:2:3:4:5", "a:00", "1:x", "1.", "-5"])
def test_pbs_walltime_errors(text: str) -> None:
    with pytest.raises(ParseError, match="walltime"):
        parse_pbs_walltime_s(text)


@given(st.integers(0, 10**7))
def test_pbs_round_trip(seconds: int) -> None:
    text = format_pbs_walltime_s(seconds)
    assert parse_pbs_walltime_s(text) == seconds
    assert text.count(":") == 2
