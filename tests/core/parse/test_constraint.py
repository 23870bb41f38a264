from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.core.parse.constraint import (
    ConstraintError,
    compile_constraint,
    matches,
    parse_constraint,
    to_text,
)
from corral.core.parse.errors import ParseError

F = frozenset


@pytest.mark.parametrize(
    ("expr", "features", "ok"),
    [
        ("avx512&(ib|roce)", {"avx512", "roce"}, True),
        ("avx512&(ib|roce)", {"avx512"}, False),
        ("avx512&(ib|roce)", {"ib", "roce"}, False),
        ("a,b", {"a", "b"}, True),  # comma is AND
        ("a,b", {"a"}, False),
        ("a|b&c", {"a"}, True),  # & binds tighter than |
        ("a|b&c", {"b"}, False),
        ("(a|b)&c", {"b", "c"}, True),
        ("[rack1|rack2]", {"rack2"}, True),
        ("[rack1|rack2]", {"rack3"}, False),
        ("gpu*2", {"gpu"}, True),  # counts ignored per node
        ("[(knl&flat)*4&haswell*1]", {"knl", "flat", "haswell"}, True),
        ("  avx512  &  ib ", {"avx512", "ib"}, True),
        ("", set(), True),
        ("x86_64&sm-80.v2", {"x86_64", "sm-80.v2"}, True),
    ],
)
def test_matching(expr: str, features: set[str], ok: bool) -> None:
    assert matches(expr, F(features)) is ok
    assert compile_constraint(expr)(F(features)) is ok
    assert parse_constraint(expr).matches(F(features)) is ok


def test_none_matches_everything() -> None:
    assert matches(None, F())


def test_exposes_features_counts_and_matching_or() -> None:
    c = parse_constraint("[(knl&snc4)*4&haswell*1]")
    assert c.features == {"knl", "snc4", "haswell"}
    assert c.counts == (("knl&snc4", 4), ("haswell", 1))
    assert c.matching_or
    plain = parse_constraint("a&(b|c)")
    assert not plain.matching_or and plain.counts == () and plain.alternatives() == ()
    alts = parse_constraint("[rack1|rack2]").alternatives()
    assert [to_text(a) for a in alts] == ["rack1", "rack2"]


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("a&&b", "expected a feature name, got '&' at position 2"),
        ("a b", "missing operator before 'b' at position 2"),
        ("(a", "missing ')' for '(' at position 0"),
        ("a)", "unmatched ')' at position 1"),
        ("[a|[b]]", "square brackets cannot nest"),
        ("a*0", "node count of at least 1"),
        ("a*", "node count of at least 1"),
        ("&a", "got '&' at position 0"),
        ("a|", "got end of expression"),
        ("(a]", "missing ')'"),
    ],
)
def test_errors(expr: str, fragment: str) -> None:
    with pytest.raises(ConstraintError) as ei:
        parse_constraint(expr)
    assert fragment in str(ei.value)
    assert isinstance(ei.value, ParseError) and isinstance(ei.value, ValueError)


_feat = st.sampled_from(["a", "b", "c", "ib", "avx512"])


def _expr(depth: int) -> st.SearchStrategy[str]:
    if depth == 0:
        return _feat
    sub = _expr(depth - 1)
    return st.one_of(
        _feat,
        st.builds(lambda x, y: f"{x}&{y}", sub, sub),
        st.builds(lambda x, y: f"({x}|{y})", sub, sub),
    )


def _eval(expr: str, feats: frozenset[str]) -> bool:
    py = expr.replace("&", " and ").replace("|", " or ")
    env = {name: name in feats for name in ["a", "b", "c", "ib", "avx512"]}
    return bool(eval(py, {}, env))  # noqa: S307 - test oracle over a fixed alphabet


@given(_expr(3), st.frozensets(_feat))
def test_matches_like_boolean_logic_and_text_round_trips(expr: str, feats: frozenset[str]) -> None:
    assert matches(expr, feats) == _eval(expr, feats)
    canon = to_text(parse_constraint(expr).root)
    assert matches(canon, feats) == matches(expr, feats)
