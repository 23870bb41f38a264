from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.core.parse.errors import ParseError
from corral.core.parse.memory import (
    format_mem_mb,
    format_pbs_size_bytes,
    format_pbs_size_mb,
    parse_mem_mb,
    parse_pbs_size_bytes,
    parse_pbs_size_mb,
)


@pytest.mark.parametrize(
    ("text", "mb"),
    [("4G", 4096), ("4g", 4096), ("4GB", 4096), ("4GiB", 4096), ("500", 500), ("500M", 500),
     ("1K", 1), ("2048K", 2), ("2049K", 3), ("1.5G", 1536), ("2T", 2 * 1024 * 1024),
     ("0", 0), (" 100M ", 100)],
)
def test_parse_mem(text: str, mb: int) -> None:
    assert parse_mem_mb(text) == mb


def test_default_unit() -> None:
    assert parse_mem_mb("4", default_unit="G") == 4096


@pytest.mark.parametrize("text", ["", "abc", "4X", "-1", "4B", "G", "1..5G", "4 G B"])
def test_parse_mem_errors(text: str) -> None:
    with pytest.raises(ParseError) as ei:
        parse_mem_mb(text)
    assert repr(text) in str(ei.value)


@pytest.mark.parametrize(("mb", "text"), [(4096, "4G"), (100, "100M"), (16000, "16000M"),
                                          (1024 * 1024, "1T"), (0, "0M"), (1536, "1536M")])
def test_format_mem(mb: int, text: str) -> None:
    assert format_mem_mb(mb) == text


@given(st.integers(0, 10**9))
def test_mem_round_trip(mb: int) -> None:
    assert parse_mem_mb(format_mem_mb(mb)) == mb


@pytest.mark.parametrize(
    ("text", "size"),
    [("5678", 5678), ("5678b", 5678), ("1kb", 1024), ("4gb", 4 << 30), ("4GB", 4 << 30),
     ("3mb", 3 << 20), ("8k", 8192), ("2w", 16), ("1kw", 8192), ("1tb", 1 << 40)],
)
def test_parse_pbs_size(text: str, size: int) -> None:
    assert parse_pbs_size_bytes(text) == size


def test_pbs_size_in_mb_rounds_up() -> None:
    assert parse_pbs_size_mb("5678") == 1
    assert parse_pbs_size_mb("4gb") == 4096
    assert format_pbs_size_mb(4096) == "4gb"


@pytest.mark.parametrize("text", ["", "1.5gb", "abc", "4xb", "-1"])
def test_parse_pbs_size_errors(text: str) -> None:
    with pytest.raises(ParseError, match="PBS size"):
        parse_pbs_size_bytes(text)


@given(st.integers(0, 10**15))
def test_pbs_round_trip(size: int) -> None:
    assert parse_pbs_size_bytes(format_pbs_size_bytes(size)) == size
