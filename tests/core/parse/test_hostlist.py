from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.core.parse.errors import ParseError
from corral.core.parse.hostlist import compress, count, expand


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("", []),
        ("vm", ["vm"]),
        ("node[01-04,07],gpu[1-2]",
         ["node01", "node02", "node03", "node04", "node07", "gpu1", "gpu2"]),
        ("n[8-10]", ["n8", "n9", "n10"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
        ("n[1-2]-ib", ["n1-ib", "n2-ib"]),
        ("a b,c", ["a", "b", "c"]),
        ("n[3,1]", ["n3", "n1"]),
        ("n1,n1", ["n1", "n1"]),
    ],
)
def test_expand(expr: str, names: list[str]) -> None:
    assert expand(expr) == names
    assert count(expr) == len(names)


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("n[1-2", "missing ']'"),
        ("n1]", "unmatched ']' at position 2"),
        ("n[1[2]]", "nested '[' at position 3"),
        ("n[]", "empty brackets"),
        ("n[a-b]", "bad range 'a-b'"),
        ("n[1-]", "bad range '1-'"),
        ("n[5-1]", "range '5-1' runs backwards"),
        ("a,,b", "empty host name before ',' at position 2"),
        ("a,", "empty host name after the last ','"),
    ],
)
def test_expand_errors_name_the_fault(expr: str, fragment: str) -> None:
    with pytest.raises(ParseError) as ei:
        expand(expr)
    assert fragment in str(ei.value)
    assert repr(expr) in str(ei.value)


def test_expand_refuses_huge_lists_before_building_them() -> None:
    with pytest.raises(ParseError, match="more than 1000"):
        expand("n[0-99999999999]", max_hosts=1000)
    with pytest.raises(ParseError, match="more than 10 host"):
        expand("a[1-4]b[1-3]", max_hosts=10)


@pytest.mark.parametrize(
    ("names", "expr"),
    [
        (["n01", "n02", "n03", "n07", "gpu1"], "gpu1,n[01-03,07]"),
        (["n9", "n10", "n8"], "n[8-10]"),
        (["n08", "n09", "n10"], "n[08-10]"),
        (["vm"], "vm"),
        (["n1"], "n1"),
        (["n3", "n1", "n2", "n2"], "n[1-3]"),
        (["rack1-n01", "rack1-n02", "rack2-n01"], "rack1-n[01-02],rack2-n01"),
        (["n1-ib", "n2-ib"], "n[1-2]-ib"),
        ([], ""),
    ],
)
def test_compress(names: list[str], expr: str) -> None:
    assert compress(names) == expr


def test_compress_unsorted_keeps_order() -> None:
    assert compress(["n3", "n1", "n2"], sort=False) == "n[3,1-2]"
    assert compress(["a", "n1", "n2", "b"], sort=False) == "a,n[1-2],b"


def test_compress_rejects_bad_names() -> None:
    with pytest.raises(ParseError, match="without"):
        compress(["n[1]"])


_name = st.builds(
    lambda p, num, w, suf: f"{p}{str(num).zfill(w) if num is not None else ''}{suf}",
    st.sampled_from(["n", "node", "gpu", "rack1-n", "x"]),
    st.one_of(st.none(), st.integers(0, 120)),
    st.integers(1, 3),
    st.sampled_from(["", "", "-ib"]),
)


@given(st.lists(_name, max_size=40))
def test_expand_compress_round_trip_preserving_order(names: list[str]) -> None:
    assert expand(compress(names, sort=False)) == names


@given(st.lists(_name, max_size=40))
def test_expand_compress_round_trip_as_a_set(names: list[str]) -> None:
    out = expand(compress(names))
    assert sorted(out) == sorted(set(names))
    # and compressing again is stable
    assert compress(out) == compress(names)
