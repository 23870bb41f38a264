"""``fs_cache.FairShareCache`` gives exactly what a fresh fair-share computation gives.

Property: over any sequence of calls (random account trees with sub-accounts, zero shares,
users missing from the tree, usage maps that grow, shrink, tie and decay), each result
equals ``fair_tree_factors(build_tree(...))`` / ``classic_factors(build_tree(...))`` of
that call's own inputs, float for float; and the ranking is reused only when it must be
the same (hits happen, so the reuse path is exercised).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.config import FairshareAlgorithm
from corral.core.model.account import Account, AccountTree, Association
from corral.core.priority.assoc import build_tree
from corral.core.priority.classic import classic_factors
from corral.core.priority.fair_tree import fair_tree_factors
from corral.core.priority.fs_cache import FairShareCache

ACCOUNTS = ["a", "b", "c", "d"]
USERS = ["u1", "u2", "u3", "u4", "u5", "u6"]


@st.composite
def trees(draw: st.DrawFn) -> AccountTree:
    accounts = []
    for name in draw(st.lists(st.sampled_from(ACCOUNTS), unique=True, max_size=4)):
        parent = draw(st.sampled_from([None, "root", *ACCOUNTS]))
        accounts.append(Account(name, parent, draw(st.integers(0, 3))))
    assocs = [Association(u, a, draw(st.integers(0, 3)), draw(st.booleans()),
                          draw(st.integers(0, 2)))
              for u, a in draw(st.lists(st.tuples(st.sampled_from(USERS),
                                                  st.sampled_from([*ACCOUNTS, "root"])),
                                        max_size=10))]
    return AccountTree(tuple(accounts), tuple(assocs))


KEYS = st.tuples(st.sampled_from([*ACCOUNTS, "root", "zz"]), st.sampled_from(USERS))
VALUES = st.sampled_from([0.0, 0.0, 1.0, 2.0, 3.0, 0.5, 1e-300, 7.25, 100.0])


@st.composite
def usage_steps(draw: st.DrawFn) -> list[tuple[dict[tuple[str, str], float],
                                              set[tuple[str, str]]]]:
    """A sequence of (usage, pending keys): each step decays, bumps or re-draws values."""
    steps = []
    usage = draw(st.dictionaries(KEYS, VALUES, max_size=6))
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["decay", "bump", "same", "new"]))
        if kind == "decay":
            usage = {k: v * 0.9 for k, v in usage.items()}
        elif kind == "bump" and usage:
            k = draw(st.sampled_from(sorted(usage)))
            usage = {**usage, k: usage[k] + draw(VALUES)}
        elif kind == "new":
            usage = draw(st.dictionaries(KEYS, VALUES, max_size=6))
        steps.append((dict(usage), set(draw(st.lists(KEYS, max_size=3)))))
    return steps


@settings(max_examples=300, deadline=None)
@given(trees(), usage_steps(), st.sampled_from(list(FairshareAlgorithm)))
def test_cache_equals_fresh_computation(tree: AccountTree, steps, algorithm) -> None:  # type: ignore[no-untyped-def]
    cache = FairShareCache()
    for usage, keys in steps:
        got_fs, got_assoc = cache.factors(tree, usage, keys, algorithm)
        assoc_keys = {(a.account, a.user) for a in tree.associations}
        extra = {k for k in keys if k not in usage and k not in assoc_keys}
        index = build_tree(tree, usage, extra)
        want = (classic_factors(index) if algorithm is FairshareAlgorithm.CLASSIC
                else fair_tree_factors(index))
        assert got_fs == want
        max_ap = max((n.priority for n in index.leaves.values()), default=0)
        want_assoc = ({k: max(n.priority, 0) / max_ap for k, n in index.leaves.items()}
                      if max_ap > 0 else {})
        assert got_assoc == want_assoc


def test_the_ranking_is_reused_when_only_decay_happened() -> None:
    tree = AccountTree((Account("a"), Account("b")),
                       tuple(Association(f"u{i}", "a" if i % 2 else "b") for i in range(8)))
    usage = {(("a" if i % 2 else "b"), f"u{i}"): float(i + 1) for i in range(8)}
    cache = FairShareCache()
    first = dict(cache.factors(tree, usage, set(), FairshareAlgorithm.FAIR_TREE)[0])
    for _ in range(5):
        usage = {k: v * 0.5 for k, v in usage.items()}  # exact halving: same order
        assert cache.factors(tree, usage, set(), FairshareAlgorithm.FAIR_TREE)[0] == first
    assert cache.hits == 5 and cache.misses == 1
    usage[("a", "u1")] = 1e9  # u1 now the heaviest user of a: the ranking changes
    after = cache.factors(tree, usage, set(), FairshareAlgorithm.FAIR_TREE)[0]
    assert after == fair_tree_factors(build_tree(tree, usage))
    assert after != first and cache.misses == 2
