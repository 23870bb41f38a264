"""Fair Tree fair share (Slurm's default since 19.05) — Corral's default algorithm.

Algorithm (Slurm ``fair_tree`` documentation and ``fair_tree.c``):

1. For every association compute its **Level Fairshare** among its siblings:
   ``LF = S / U`` with ``S = shares / sum(sibling shares)`` and
   ``U = usage / usage of the parent`` (= sum of sibling usage). ``S == 0`` gives
   ``LF = 0``; ``U == 0`` (with shares) gives ``LF = inf``.
2. Visit the tree depth-first from the root, siblings in descending ``LF``. Each user
   reached is given the next rank, counting down from the number of user associations;
   its fair-share factor is ``rank / user_count`` (the first user gets 1.0).
3. Ties: sibling users with equal ``LF`` share a rank; accounts with equal ``LF`` have
   their children merged and sorted together (each child keeps the ``LF`` computed
   among its own siblings); a user tied with an account shares its rank with that
   account's highest-ranked user (users sort before accounts within a tie).

Why it is the default (and not classic): the order is decided level by level, so at every
level the sibling that used less relative to its shares always ranks above — an account
that over-used can never have a user outrank a user of an account that did not, and the
shares of one account are never diluted by how many users or sub-accounts an unrelated
account has (the "sibling dilution" of the classic formula). The factor is a rank, so it
spreads users evenly over (0, 1] however small the usage differences are.

Invariant (tested): raising one association's usage never raises its factor.
"""

from __future__ import annotations

import math

from corral.core.priority.assoc import AssocIndex, AssocNode


def level_fairshare(node: AssocNode, sibling_shares: int) -> float:
    """``S / U`` of ``node`` among its siblings (``inf`` for no usage, 0 for no shares)."""
    if node.shares <= 0 or sibling_shares <= 0:
        return 0.0
    parent_usage = node.parent.usage if node.parent is not None else 0.0
    if node.usage <= 0 or parent_usage <= 0:
        return math.inf
    return (node.shares / sibling_shares) / (node.usage / parent_usage)


def _level_values(parent: AssocNode, out: dict[int, float]) -> None:
    total_shares = sum(c.shares for c in parent.children)
    for c in parent.children:
        out[id(c)] = level_fairshare(c, total_shares)
        if not c.is_user:
            _level_values(c, out)


def fair_tree_factors(index: AssocIndex) -> dict[tuple[str, str], float]:
    """Fair-share factor in (0, 1] of every user association of the tree."""
    user_count = len(index.leaves)
    if user_count == 0:
        return {}
    lf: dict[int, float] = {}
    _level_values(index.root, lf)
    out: dict[tuple[str, str], float] = {}
    rank = user_count
    remaining = user_count  # Slurm's "rnt": rank of the next user when not tied

    def order(nodes: list[AssocNode]) -> list[AssocNode]:
        # descending LF; users before accounts in a tie; then by name for determinism
        return sorted(nodes, key=lambda n: (-lf[id(n)], not n.is_user, n.name, n.key or ()))

    def visit(siblings: list[AssocNode], account_tied: bool) -> None:
        nonlocal rank, remaining
        ordered = order(siblings)
        prev: float | None = None
        i = 0
        while i < len(ordered):
            node = ordered[i]
            value = lf[id(node)]
            tied = account_tied if i == 0 else prev == value
            if node.is_user:
                if not tied:
                    rank = remaining
                assert node.key is not None
                out[node.key] = rank / user_count
                remaining -= 1
                i += 1
            else:
                merged = list(node.children)
                j = i + 1
                while j < len(ordered) and not ordered[j].is_user and lf[id(ordered[j])] == value:
                    merged.extend(ordered[j].children)
                    j += 1
                visit(merged, tied)
                i = j
            prev = value

    visit(index.root.children, False)
    return out
