"""sshare-like fair-share rows over the scheduler's association tree."""

from __future__ import annotations

import math

import pytest

from corral.core.model.account import Account, AccountTree, Association
from corral.ops.fairshare import account_rows, share_rows


def tree() -> AccountTree:
    return AccountTree(
        accounts=(Account("physics", shares=3), Account("chem", shares=1),
                  Account("theory", parent="physics", shares=1)),
        associations=(Association("alice", "physics"), Association("bob", "chem"),
                      Association("carol", "theory")),
    )


def test_norm_shares_usage_and_classic_factor() -> None:
    usage = {("physics", "alice"): 300.0, ("chem", "bob"): 100.0}
    rows = {(r.account, r.user): r for r in share_rows(tree(), usage)}
    phys, chem = rows[("physics", "")], rows[("chem", "")]
    assert phys.norm_shares == pytest.approx(0.75) and chem.norm_shares == pytest.approx(0.25)
    assert phys.raw_usage == 300.0 and phys.eff_usage == pytest.approx(0.75)
    # usage exactly at its share: factor 0.5
    assert phys.fairshare == pytest.approx(0.5) and chem.fairshare == pytest.approx(0.5)
    theory = rows[("theory", "")]
    assert theory.depth == 1 and theory.parent == "physics"
    assert theory.raw_usage == 0 and math.isinf(theory.level_fs) and theory.fairshare == 1.0
    carol = rows[("theory", "carol")]
    assert carol.fair_tree is not None and 0 < carol.fair_tree <= 1
    assert rows[("chem", "")].fair_tree is None
    assert [r.account for r in account_rows(tree(), usage)] == ["chem", "physics", "theory"]


def test_more_usage_never_raises_the_factor() -> None:
    low = {r.account: r.fairshare for r in account_rows(tree(), {("chem", "bob"): 10.0,
                                                                 ("physics", "alice"): 10.0})}
    high = {r.account: r.fairshare for r in account_rows(tree(), {("chem", "bob"): 50.0,
                                                                  ("physics", "alice"): 10.0})}
    assert high["chem"] < low["chem"]
    assert all(0.0 <= v <= 1.0 for v in high.values())
    empty = account_rows(tree(), {})
    assert all(r.fairshare == 1.0 and r.eff_usage == 0.0 for r in empty)
    assert empty[0].to_json()["level_fs"] is None
