"""Fair Tree and classic fair share: scenarios a Slurm admin would recognise, and invariants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.model import Account, AccountTree, Association
from corral.core.priority.assoc import build_tree
from corral.core.priority.classic import classic_factors
from corral.core.priority.fair_tree import fair_tree_factors

Usage = dict[tuple[str, str], float]


def tree(accounts: list[Account], assocs: list[Association]) -> AccountTree:
    return AccountTree(tuple(accounts), tuple(assocs))


def fair_tree(t: AccountTree, usage: Usage, extra: tuple[tuple[str, str], ...] = ()
              ) -> dict[tuple[str, str], float]:
    return fair_tree_factors(build_tree(t, usage, extra))


def classic(t: AccountTree, usage: Usage) -> dict[tuple[str, str], float]:
    return classic_factors(build_tree(t, usage))


TWO_ACCOUNTS = tree(
    [Account("chem", shares=50), Account("phys", shares=50)],
    [Association("heavy", "chem"), Association("light", "chem"), Association("pat", "phys")],
)


def test_heavy_user_ranks_below_light_user_in_fifty_fifty_accounts() -> None:
    usage = {("chem", "heavy"): 900.0, ("chem", "light"): 100.0, ("phys", "pat"): 1000.0}
    fs = fair_tree(TWO_ACCOUNTS, usage)
    # chem and phys tie at the top (LF 1); their users are ranked together:
    # light LF 5, pat LF 1, heavy LF 0.56
    assert fs == {("chem", "light"): 1.0, ("phys", "pat"): pytest.approx(2 / 3),
                  ("chem", "heavy"): pytest.approx(1 / 3)}


def test_under_served_account_outranks_every_user_of_an_over_served_one() -> None:
    # phys used 10 of 110 with half the shares: even its single (account-heavy) user ranks
    # above chem's light user, whose account over-used. Classic lets chem's light user
    # come close; Fair Tree never lets it pass.
    usage = {("chem", "heavy"): 99.0, ("chem", "light"): 1.0, ("phys", "pat"): 10.0}
    fs = fair_tree(TWO_ACCOUNTS, usage)
    assert fs[("phys", "pat")] == 1.0
    assert fs[("chem", "light")] == pytest.approx(2 / 3)
    assert fs[("chem", "heavy")] == pytest.approx(1 / 3)


def test_no_sibling_dilution() -> None:
    # 'big' has ten users, 'small' one; with equal shares and equal per-user usage
    # small's user is not pushed down by big's headcount.
    accounts = [Account("big", shares=1), Account("small", shares=1)]
    assocs = [Association(f"b{i}", "big") for i in range(10)] + [Association("s", "small")]
    usage: Usage = {("big", f"b{i}"): 10.0 for i in range(10)}
    usage[("small", "s")] = 10.0
    fs = fair_tree(tree(accounts, assocs), usage)
    assert fs[("small", "s")] == 1.0  # small used 10 of 110 for half the shares
    assert all(fs[("big", f"b{i}")] == pytest.approx(10 / 11) for i in range(10))  # one tie


def test_sibling_users_with_equal_level_fairshare_share_a_rank() -> None:
    t = tree([], [Association("u1", "root"), Association("u2", "root"),
                  Association("u3", "root")])
    fs = fair_tree(t, {("root", "u3"): 10.0})
    assert fs == {("root", "u1"): 1.0, ("root", "u2"): 1.0, ("root", "u3"): pytest.approx(1 / 3)}


def test_user_tied_with_account_shares_rank_with_its_best_user() -> None:
    t = tree([Account("acct", shares=1)],
             [Association("x", "root"), Association("a1", "acct"), Association("a2", "acct")])
    fs = fair_tree(t, {("root", "x"): 10.0, ("acct", "a1"): 10.0})
    assert fs[("root", "x")] == 1.0
    assert fs[("acct", "a2")] == 1.0
    assert fs[("acct", "a1")] == pytest.approx(1 / 3)


def test_zero_shares_rank_last() -> None:
    t = tree([], [Association("zero", "root", shares=0), Association("one", "root")])
    fs = fair_tree(t, {("root", "one"): 1e9})
    assert fs[("root", "one")] == 1.0 and fs[("root", "zero")] == 0.5


def test_unknown_associations_get_one_share() -> None:
    t = tree([Account("chem", shares=1)], [Association("ann", "chem")])
    fs = fair_tree(t, {("chem", "ann"): 100.0}, extra=(("chem", "newbie"), ("nowhere", "zed")))
    # newbie: a 1-share user under chem; zed: a 1-share user under root; neither used anything
    assert set(fs) == {("chem", "ann"), ("chem", "newbie"), ("nowhere", "zed")}
    assert fs[("nowhere", "zed")] == 1.0
    assert fs[("chem", "newbie")] > fs[("chem", "ann")]


def test_account_parent_cycles_and_unknown_parents_hang_under_root() -> None:
    t = tree([Account("a", parent="b"), Account("b", parent="a"), Account("c", parent="gone")],
             [Association("u", "a"), Association("v", "c")])
    fs = fair_tree(t, {("a", "u"): 5.0})
    assert fs[("c", "v")] == 1.0 and fs[("a", "u")] == 0.5


def test_classic_formula() -> None:
    # two users under root, equal shares, equal usage: UE = S = 0.5 -> 2^-1
    t = tree([], [Association("u", "root"), Association("v", "root")])
    assert classic(t, {("root", "u"): 5.0, ("root", "v"): 5.0}) == {
        ("root", "u"): 0.5, ("root", "v"): 0.5}
    assert classic(t, {}) == {("root", "u"): 1.0, ("root", "v"): 1.0}


def test_classic_effective_usage_inherits_from_the_parent() -> None:
    usage = {("chem", "heavy"): 99.0, ("chem", "light"): 1.0, ("phys", "pat"): 10.0}
    fs = classic(TWO_ACCOUNTS, usage)
    ue_chem = 100 / 110
    ue_light = 1 / 110 + (ue_chem - 1 / 110) * 0.5
    assert fs[("chem", "light")] == pytest.approx(2 ** (-ue_light / 0.25))
    assert fs[("phys", "pat")] == pytest.approx(2 ** (-(10 / 110) / 0.5))
    assert fs[("phys", "pat")] > fs[("chem", "light")] > fs[("chem", "heavy")]


# ---------------------------------------------------------------- invariants


@st.composite
def trees_and_usage(draw: st.DrawFn) -> tuple[AccountTree, Usage]:
    n_acc = draw(st.integers(0, 5))
    accounts = []
    for i in range(n_acc):
        parent = draw(st.sampled_from(["root"] + [f"a{j}" for j in range(i)]))
        accounts.append(Account(f"a{i}", parent=parent, shares=draw(st.integers(0, 5))))
    names = ["root"] + [a.name for a in accounts]
    assocs = []
    usage: Usage = {}
    for u in range(draw(st.integers(1, 8))):
        acct = draw(st.sampled_from(names))
        assocs.append(Association(f"u{u}", acct, shares=draw(st.integers(0, 4))))
        usage[(acct, f"u{u}")] = draw(st.sampled_from([0.0, 1.0, 10.0, 100.0, 12345.6]))
    return tree(accounts, assocs), usage


@settings(max_examples=150, deadline=None)
@given(trees_and_usage(), st.data())
def test_more_usage_never_raises_the_factor(tu: tuple[AccountTree, Usage],
                                            data: st.DataObject) -> None:
    t, usage = tu
    key = data.draw(st.sampled_from(sorted(usage)))
    more = dict(usage)
    more[key] = usage[key] + data.draw(st.sampled_from([0.5, 10.0, 1e4]))
    for algo in (fair_tree, classic):
        before, after = algo(t, usage), algo(t, more)  # type: ignore[operator]
        assert after[key] <= before[key] + 1e-12, (algo.__name__, key)


@settings(max_examples=100, deadline=None)
@given(trees_and_usage())
def test_factors_are_in_range_and_fair_tree_ranks_someone_first(tu: tuple[AccountTree, Usage]
                                                                ) -> None:
    t, usage = tu
    ft, cl = fair_tree(t, usage), classic(t, usage)
    assert set(ft) == set(cl) == set(usage)
    assert all(0.0 < v <= 1.0 for v in ft.values())
    assert max(ft.values()) == 1.0
    assert all(0.0 <= v <= 1.0 for v in cl.values())


def test_results_do_not_depend_on_input_order() -> None:
    usage = {("chem", "heavy"): 900.0, ("chem", "light"): 100.0, ("phys", "pat"): 1000.0}
    rev = AccountTree(tuple(reversed(TWO_ACCOUNTS.accounts)),
                      tuple(reversed(TWO_ACCOUNTS.associations)))
    assert fair_tree(rev, usage) == fair_tree(TWO_ACCOUNTS, usage)
    assert classic(rev, usage) == classic(TWO_ACCOUNTS, usage)


def test_an_account_that_is_its_own_parent_hangs_under_the_root() -> None:
    """Found by the fs_cache property test: an account naming itself as parent (reached
    through a child) used to end up as its own child, its users unreachable but counted."""
    from corral.core.model.account import Account, AccountTree, Association
    from corral.core.priority.assoc import build_tree
    from corral.core.priority.fair_tree import fair_tree_factors

    tree = AccountTree((Account("b", "c"), Account("c", "c")),
                       (Association("u1", "b"), Association("u2", "c")))
    index = build_tree(tree, {})
    c = next(n for n in index.root.children if n.name == "c")
    assert [n.name for n in c.children] == ["b", "u2"]
    assert sorted(fair_tree_factors(index)) == [("b", "u1"), ("c", "u2")]
