"""The association tree both fair-share algorithms walk: accounts, user leaves, usage.

Built once per priority computation from ``AccountTree`` plus the usage map plus the
associations pending jobs name. Rules, so any snapshot gives a well-formed tree:

- an account whose parent is ``None``, ``root`` or unknown hangs under the root; accounts
  caught in a parent cycle are re-attached under the root (in name order);
- each ``Association`` is a user leaf under its account (the first one wins if repeated);
- an ``(account, user)`` seen in usage or in a pending job but not in the tree becomes a
  1-share user leaf: under that account when the account exists, else directly under the
  root, so unknown users compete fairly instead of being dropped;
- an account's usage is the sum of its subtree (its users and sub-accounts).

Children are kept in name order (accounts and users together) so results never depend on
the order of the input tuples.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from corral.core.model.account import ROOT_ACCOUNT, AccountTree


@dataclass(slots=True, eq=False)
class AssocNode:
    name: str  # account name, or user name for a leaf
    shares: int = 1
    usage: float = 0.0
    priority: int = 0
    key: tuple[str, str] | None = None  # (account, user) of a user leaf; None for accounts
    parent: AssocNode | None = None
    children: list[AssocNode] = field(default_factory=list)

    @property
    def is_user(self) -> bool:
        return self.key is not None


@dataclass(slots=True)
class AssocIndex:
    root: AssocNode
    leaves: dict[tuple[str, str], AssocNode]


def build_tree(
    tree: AccountTree,
    usage: Mapping[tuple[str, str], float],
    extra: Iterable[tuple[str, str]] = (),
) -> AssocIndex:
    root = AssocNode(ROOT_ACCOUNT, shares=1)
    accounts: dict[str, AssocNode] = {}
    parent_of: dict[str, str] = {}
    for a in tree.accounts:
        if a.name == ROOT_ACCOUNT or a.name in accounts:
            continue
        accounts[a.name] = AssocNode(a.name, shares=max(a.shares, 0))
        parent_of[a.name] = a.parent or ROOT_ACCOUNT
    # attach accounts; unknown parents go under root
    attached: set[str] = set()

    def attach(name: str, chain: set[str]) -> None:
        if name in attached:
            return
        node = accounts[name]
        par = parent_of[name]
        if par == ROOT_ACCOUNT or par not in accounts or par in chain:
            node.parent = root
        else:
            attach(par, chain | {par})
            node.parent = accounts[par]
        attached.add(name)

    for name in sorted(accounts):
        attach(name, {name})
    for name in sorted(accounts):
        node = accounts[name]
        assert node.parent is not None
        node.parent.children.append(node)

    leaves: dict[tuple[str, str], AssocNode] = {}

    def add_leaf(account: str, user: str, shares: int, priority: int) -> None:
        key = (account, user)
        if key in leaves:
            return
        parent = root if account == ROOT_ACCOUNT else accounts.get(account, root)
        leaf = AssocNode(user, max(shares, 0), float(usage.get(key, 0.0)), priority, key, parent)
        parent.children.append(leaf)
        leaves[key] = leaf

    for assoc in tree.associations:
        add_leaf(assoc.account, assoc.user, assoc.shares, assoc.priority)
    for key in sorted(k for k in set(usage).union(extra) if k not in leaves):
        add_leaf(key[0], key[1], 1, 0)

    def total(node: AssocNode) -> float:
        if node.key is None:
            node.children.sort(key=lambda c: (c.name, c.key is not None))
            node.usage = sum(total(c) for c in node.children)
        return node.usage

    total(root)
    return AssocIndex(root, leaves)
