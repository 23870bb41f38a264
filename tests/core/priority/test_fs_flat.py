"""``fs_flat``: on a flat tree, counting gives the factors the whole Fair Tree ranking gives.

Property: for flat trees (users under the root, under one account, under a chain of lone
accounts; equal or unequal shares), over sequences of usage maps (ties, zeros, decay,
neighbouring floats whose level fairshare rounds to the same value, keys the tree lacks),
``FairShareCache.factors_of`` gives, for every key asked, exactly the float of
``fair_tree_factors(build_tree(...))``, whether the usage is a dict or a ``UsageTable``
(keys kept as one tuple while they do not change, as a replay passes them); and the
counting path is the one taken where it applies.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.config import FairshareAlgorithm
from corral.core.model.account import Account, AccountTree, Association
from corral.core.priority.assoc import build_tree
from corral.core.priority.fair_tree import fair_tree_factors
from corral.core.priority.fs_cache import FairShareCache
from corral.core.priority.fs_flat import FlatList, flat_factors
from corral.core.priority.usage_table import UsageTable

FAIR_TREE = FairshareAlgorithm.FAIR_TREE
Key = tuple[str, str]
USERS = [f"u{i}" for i in range(8)]
BASE = [0.0, 1.0, 2.0, 3.0, 0.1, 1e-300, 7.25, 1e6, 1.0 / 3.0]
# neighbouring floats: their level fairshare often rounds to one value (ties by rounding);
# not those of 0.0 (5e-324 / usage is 0.0: the general path itself divides by zero)
VALUES = st.sampled_from(BASE).flatmap(lambda v: st.sampled_from(
    [v] if v == 0.0 else
    [v, math.nextafter(v, math.inf), math.nextafter(math.nextafter(v, math.inf), math.inf)]))


@st.composite
def flat_trees(draw: st.DrawFn) -> tuple[AccountTree, str]:
    """A flat tree and the account its users are in ("root": straight under the root)."""
    depth = draw(st.integers(0, 2))
    accounts = tuple(Account(f"a{d}", f"a{d - 1}" if d else None) for d in range(depth))
    where = f"a{depth - 1}" if depth else "root"
    users = draw(st.lists(st.sampled_from(USERS), unique=True, min_size=1, max_size=8))
    equal = draw(st.booleans())
    shares = draw(st.integers(1, 3))
    assocs = tuple(Association(u, where, shares if equal else draw(st.integers(0, 3)))
                   for u in users)
    return AccountTree(accounts, assocs), where


@settings(max_examples=300, deadline=None)
@given(flat_trees(), st.data())
def test_counting_equals_the_whole_ranking(shape: tuple[AccountTree, str],
                                           data: st.DataObject) -> None:
    tree, where = shape
    known = [(a.account, a.user) for a in tree.associations]
    keys = st.sampled_from([*known, (where, "stranger")])
    cache = FairShareCache()
    usage: dict[Key, float] = data.draw(st.dictionaries(st.sampled_from(known), VALUES))
    as_table = data.draw(st.booleans())  # as a replay passes it: a ``UsageTable``
    kept: tuple[Key, ...] = ()
    for _ in range(data.draw(st.integers(1, 5))):
        kind = data.draw(st.sampled_from(["decay", "bump", "same", "new"]))
        if kind == "decay":
            usage = {k: v * 0.97 for k, v in usage.items()}
        elif kind == "bump" and usage:
            k = data.draw(st.sampled_from(sorted(usage)))
            usage = {**usage, k: usage[k] + data.draw(VALUES)}
        elif kind == "new":
            usage = data.draw(st.dictionaries(keys, VALUES))
        wanted = set(data.draw(st.lists(keys, max_size=5)))
        given: Mapping[Key, float] = usage
        if as_table:  # the same keys in the same order: the same tuple object
            kept = kept if kept == tuple(usage) else tuple(usage)
            given = UsageTable(kept, tuple(usage.values()))
        got, _ = cache.factors_of(tree, given, wanted, FAIR_TREE)
        have = set(known)
        extra = {k for k in wanted if k not in usage and k not in have}
        want = fair_tree_factors(build_tree(tree, usage, extra))
        assert {k: got[k] for k in wanted} == {k: want[k] for k in wanted}


@settings(max_examples=200, deadline=None)
@given(flat_trees(), st.data())
def test_a_table_of_the_users_in_ranking_order_is_read_as_it_is(
        shape: tuple[AccountTree, str], data: st.DataObject) -> None:
    """A ``UsageTable`` whose keys are the flat list's users in its order (what the
    simulator passes: its tree's associations, placed first) is read without gathering
    (the places are the users' own) and gives the whole ranking's floats; tables in
    another order, and dicts, in between still do."""
    tree, where = shape
    known = tuple((a.account, a.user) for a in tree.associations)
    cache = FairShareCache()
    cache.factors_of(tree, {}, set(), FAIR_TREE)  # builds the flat list, if it is flat
    order = cache.flat.keys if cache.flat is not None else known
    assert set(order) == set(known)
    for _ in range(data.draw(st.integers(1, 6))):
        values = data.draw(st.lists(VALUES, min_size=len(order), max_size=len(order)))
        usage = dict(zip(order, values, strict=True))
        kind = data.draw(st.sampled_from(["in order", "in order", "reversed", "dict"]))
        given: Mapping[Key, float] = usage
        if kind == "in order":
            given = UsageTable(order, tuple(values))  # the same tuple object every time
        elif kind == "reversed":
            given = UsageTable(order[::-1], tuple(values[::-1]))
        wanted = set(data.draw(st.lists(st.sampled_from(known), max_size=5)))
        got, _ = cache.factors_of(tree, given, wanted, FAIR_TREE)
        want = fair_tree_factors(build_tree(tree, usage))
        assert {k: got[k] for k in wanted} == {k: want[k] for k in wanted}
        if kind == "in order" and cache.flat is not None and len(order) > 1:
            assert isinstance(given, UsageTable)
            assert cache.flat.usage_of(given) is given.values_  # read as it is


def test_the_counting_path_is_taken_and_handles_rounding_ties() -> None:
    users = [f"u{i}" for i in range(6)]
    tree = AccountTree((Account("g"),), tuple(Association(u, "g") for u in users))
    cache = FairShareCache()
    v = 7.25
    near = [v, math.nextafter(v, 8.0), math.nextafter(math.nextafter(v, 8.0), 8.0)]
    usage = {("g", "u0"): near[0], ("g", "u1"): near[1], ("g", "u2"): near[2],
             ("g", "u3"): 3.0, ("g", "u5"): 0.0}
    total = sum(usage.values())
    lf = [(1 / 6) / (u / total) for u in near]
    assert lf[0] == lf[1] == lf[2]  # three usages, one level fairshare: a tie by rounding
    keys = {("g", u) for u in users}
    got, _ = cache.factors_of(tree, usage, keys, FAIR_TREE)
    assert got == fair_tree_factors(build_tree(tree, usage))
    assert got[("g", "u0")] == got[("g", "u1")] == got[("g", "u2")]
    assert cache.flat_hits == 1 and cache.misses == 0  # counted, never ranked
    # the same keys in the same order again, other values: the kept places are reused
    usage = {k: u * 0.5 for k, u in usage.items()}
    got, _ = cache.factors_of(tree, usage, keys, FAIR_TREE)
    assert got == fair_tree_factors(build_tree(tree, usage))
    assert cache.flat_hits == 2


def test_refused_where_the_general_path_would_differ() -> None:
    flat = FlatList((("g", "a"), ("g", "b")), 0.5)
    assert flat_factors(flat, {}, [("g", "a")]) is None  # no usage at all: everyone inf
    assert flat_factors(flat, {("g", "a"): math.nan}, [("g", "a")]) is None
    assert flat_factors(flat, {("g", "a"): math.inf}, [("g", "a")]) is None
    # usage / total underflows to 0.0: the general path divides by zero there
    assert flat_factors(flat, {("g", "a"): 5e-324, ("g", "b"): 1e300}, [("g", "a")]) is None
    assert flat_factors(flat, {("g", "a"): 1.0, ("g", "b"): 3.0}, [("g", "a")]) == {
        ("g", "a"): 1.0}


def test_not_flat_trees_take_the_general_path() -> None:
    tree = AccountTree((Account("a"), Account("b")),
                       (Association("x", "a"), Association("y", "b")))
    cache = FairShareCache()
    usage = {("a", "x"): 1.0, ("b", "y"): 2.0}
    got, _ = cache.factors_of(tree, usage, {("a", "x")}, FAIR_TREE)
    assert got == fair_tree_factors(build_tree(tree, usage))
    assert cache.flat is None and cache.flat_hits == 0 and cache.misses == 1


def test_usage_table_reads_as_the_dict_of_its_keys_and_values() -> None:
    keys = (("g", "a"), ("g", "b"), ("h", "a"))
    table = UsageTable(keys, (1.5, 0.0, 7.0))
    plain = dict(zip(keys, (1.5, 0.0, 7.0), strict=True))
    assert dict(table) == plain and list(table) == list(plain) and len(table) == 3
    assert table == plain and table[("h", "a")] == 7.0
    assert table.get(("x", "y")) is None and table.get(("x", "y"), 2.0) == 2.0
    assert ("g", "b") in table and ("x", "y") not in table
    with pytest.raises(KeyError):
        table[("x", "y")]
    with pytest.raises(ValueError, match="2 keys but 1 values"):
        UsageTable(keys[:2], (1.0,))
    with pytest.raises(ValueError, match="appears twice"):
        UsageTable((("g", "a"), ("g", "a")), (1.0, 2.0))
