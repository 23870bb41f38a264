"""Fair share per account and user, like ``sshare``: shares, usage and where each one stands.

Built on the same association tree the scheduler walks (``corral.core.priority.assoc``),
from the configured accounts and the controller's usage map ``(account, user) -> CPU-s``.
For each node of the tree (accounts, then their users):

- ``norm_shares``: its share of the whole cluster, ``shares / sum(sibling shares)`` times
  the parent's ``norm_shares`` (root = 1);
- ``raw_usage``: CPU-seconds charged to it and its subtree;
- ``eff_usage``: ``raw_usage / root usage`` (0 when the cluster has no usage yet);
- ``level_fs``: Fair Tree's level fair share ``S / U`` among its siblings (``inf`` when it
  has shares and no usage: it is owed the most);
- ``fairshare``: the classic factor ``2 ** (-eff_usage / norm_shares)``: 1 for no usage,
  0.5 when usage equals its share, towards 0 beyond. It is a bounded number a dashboard can
  plot for accounts; the scheduler's own factor for a user under Fair Tree (its rank) is in
  ``fair_tree`` for user rows.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from corral.core.model.account import AccountTree
from corral.core.priority.assoc import AssocNode, build_tree
from corral.core.priority.fair_tree import fair_tree_factors, level_fairshare


@dataclass(frozen=True, slots=True)
class ShareRow:
    account: str
    user: str  # "" for an account row
    parent: str
    depth: int
    shares: int
    norm_shares: float
    raw_usage: float
    eff_usage: float
    level_fs: float
    fairshare: float
    fair_tree: float | None  # Fair Tree factor of a user association (None for accounts)

    def to_json(self) -> dict[str, object]:
        return {"account": self.account, "user": self.user, "parent": self.parent,
                "depth": self.depth, "shares": self.shares, "norm_shares": self.norm_shares,
                "raw_usage": self.raw_usage, "eff_usage": self.eff_usage,
                "level_fs": None if math.isinf(self.level_fs) else self.level_fs,
                "fairshare": self.fairshare, "fair_tree": self.fair_tree}


def classic_factor(eff_usage: float, norm_shares: float) -> float:
    if norm_shares <= 0:
        return 0.0
    return float(2.0 ** (-eff_usage / norm_shares))


def share_rows(tree: AccountTree, usage: Mapping[tuple[str, str], float]) -> list[ShareRow]:
    """Every account (depth-first, by name) followed by its users, as ``sshare -a``."""
    index = build_tree(tree, usage)
    root = index.root
    total = root.usage
    ft = fair_tree_factors(index)
    out: list[ShareRow] = []

    def visit(node: AssocNode, norm: float, depth: int) -> None:
        sib = sum(c.shares for c in node.children)
        for c in node.children:
            n = norm * (c.shares / sib) if sib > 0 else 0.0
            eff = c.usage / total if total > 0 else 0.0
            parent = node.name
            account = c.key[0] if c.key is not None else c.name
            out.append(ShareRow(
                account=account, user=c.key[1] if c.key is not None else "", parent=parent,
                depth=depth, shares=c.shares, norm_shares=n, raw_usage=c.usage,
                eff_usage=eff, level_fs=level_fairshare(c, sib),
                fairshare=classic_factor(eff, n),
                fair_tree=ft.get(c.key) if c.key is not None else None))
            if c.key is None:
                visit(c, n, depth + 1)

    visit(root, 1.0, 0)
    return out


def account_rows(tree: AccountTree, usage: Mapping[tuple[str, str], float]) -> list[ShareRow]:
    """Only the account rows of ``share_rows``."""
    return [r for r in share_rows(tree, usage) if not r.user]
