"""Fair share from one call to the next: the tree kept, only what the usage moved redone.

Multifactor priority runs every scheduling cycle. Between two cycles the account tree and
the set of associations are nearly always the same objects, while every usage value has
moved a little (decay, running jobs). Rebuilding the association tree and ranking it from
scratch every cycle was most of a multifactor replay's time. ``FairShareCache`` computes
the same factors incrementally; its results are identical to a fresh computation.

Algorithm:

1. **Structure**, per (account tree object, algorithm, set of leaves the tree lacks):
   ``assoc.build_tree`` once, then the nodes numbered so that every account's children
   are consecutive (root 0, then each sibling list in breadth-first order). Kept per
   sibling list: its parent, its range, each child's share fraction
   ``shares / sum(sibling shares)``; per node its static tie-break rank (Fair Tree's
   ``(not is_user, name, key)`` order); the assoc factors (association priorities).
2. **Usage** on every call: each leaf's value from the mapping; each account's the
   ``sum`` of its children's in build_tree's order (the same floats it computes).
3. **Level fairshare** per sibling list: ``share / (usage / parent usage)``, ``inf``
   without usage, ``0`` without shares (``fair_tree.level_fairshare``'s arithmetic),
   one C-level map where every child has shares and usage.
4. **Fair Tree ranking**: the factors are ranks: a function only of the order of the
   level fairshare values inside each sibling list the ranking visits and of which
   neighbours tie. The last ranking recorded those lists and their ties; if under the new
   values every list is still descending with exactly the same ties, every sort and tie
   test of the ranking comes out the same and its factors are reused. Otherwise the lists
   are ranked again (``_rank``: ``fair_tree.fair_tree_factors``'s walk, on numbers).
   **Classic** factors move continuously with usage: recomputed on the kept tree.
5. **Flat trees** (``factors_of``, for a caller that needs a few associations' factors:
   the queue's): when the ranking is one list of every user with equal shares (a trace
   replay's tree), ``fs_flat`` counts each asked user's rank instead of ranking everyone.

Invariant (property test, ``tests/core/priority/test_fs_cache.py``): for any sequence of
calls each result equals ``fair_tree_factors(build_tree(tree, usage, extra))`` (or
``classic_factors``) of that call's inputs. Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from itertools import accumulate, repeat
from operator import eq, ge, neg, truediv

from corral.core.config import FairshareAlgorithm
from corral.core.model.account import AccountTree
from corral.core.priority.assoc import AssocIndex, AssocNode, build_tree
from corral.core.priority.classic import classic_factors
from corral.core.priority.fs_flat import FlatList, flat_factors, flat_list
from corral.core.priority.usage_table import UsageTable

Key = tuple[str, str]
_INF = math.inf


class FairShareCache:
    """One tree's numbered structure and last ranking; ``factors`` answers a call."""

    def __init__(self) -> None:
        self.tree: AccountTree | None = None
        self.algorithm: FairshareAlgorithm | None = None
        self.assoc_keys: frozenset[Key] = frozenset()
        self.extra: frozenset[Key] | None = None
        self.index: AssocIndex | None = None
        self.nodes: list[AssocNode] = []
        self.is_user: list[bool] = []
        self.keys: list[Key | None] = []
        self.srank: list[int] = []
        self.span: list[tuple[int, int]] = []  # children range of each node
        self.leaf_pos: list[int] = []
        self.leaf_keys: list[Key] = []
        self.runs: list[tuple[int, int, int]] = []  # (start, end, first leaf) of leaf runs
        self.post: list[int] = []  # accounts, children before parents
        # (parent, start, end, share fractions or None when a child has no shares)
        self.groups: list[tuple[int, int, int, list[float] | None, list[float | None]]] = []
        self.assoc: dict[Key, float] = {}
        self.fairshare: dict[Key, float] = {}
        self.visited: list[tuple[list[int], list[bool]]] = []
        # the last usage keys found all in the tree
        self.usage_in_tree: Sequence[Key] = []
        self.flat: FlatList | None = None  # set when the tree is flat (``fs_flat``)
        self.hits = self.misses = self.flat_hits = 0

    def factors(
        self,
        tree: AccountTree,
        usage: Mapping[Key, float],
        keys: Iterable[Key],
        algorithm: FairshareAlgorithm,
    ) -> tuple[dict[Key, float], dict[Key, float]]:
        """(fair-share factor, assoc factor) per association; shared, read-only dicts.

        ``keys`` are the associations pending jobs name (leaves added when the tree
        lacks them, as ``build_tree``'s ``extra``)."""
        self._prepare(tree, usage, keys if isinstance(keys, Collection) else list(keys),
                      algorithm)
        return self._all_factors(usage, algorithm)

    def factors_of(
        self,
        tree: AccountTree,
        usage: Mapping[Key, float],
        keys: Collection[Key],
        algorithm: FairshareAlgorithm,
    ) -> tuple[dict[Key, float], dict[Key, float]]:
        """``factors``, where the fair-share dict need only hold ``keys``: on a flat tree
        (``fs_flat``) only those are computed, by counting; otherwise all, as ``factors``."""
        self._prepare(tree, usage, keys, algorithm)
        if self.flat is not None and algorithm is FairshareAlgorithm.FAIR_TREE:
            got = flat_factors(self.flat, usage, keys)
            if got is not None:
                self.flat_hits += 1
                return got, self.assoc
        return self._all_factors(usage, algorithm)

    def _prepare(self, tree: AccountTree, usage: Mapping[Key, float], keys: Collection[Key],
                 algorithm: FairshareAlgorithm) -> None:
        """Keep or rebuild the numbered structure for this call's tree and leaves."""
        if tree is not self.tree:
            self.tree = tree
            self.assoc_keys = frozenset((a.account, a.user) for a in tree.associations)
            self.extra = None
            self.usage_in_tree = []
        have = self.assoc_keys
        extra = (frozenset() if have.issuperset(keys)  # the common case, at C level
                 else frozenset(k for k in keys if k not in have and k not in usage))
        # the same keys as last time need no new check (a ``UsageTable``'s keys tuple is
        # the same object while they are; a list otherwise, compared at C level)
        seen = usage.keys_ if isinstance(usage, UsageTable) else list(usage)
        if seen is not self.usage_in_tree and seen != self.usage_in_tree:
            if have.issuperset(seen):
                self.usage_in_tree = seen
            else:
                self.usage_in_tree = []
                extra = extra.union(k for k in usage if k not in have)
        if extra != self.extra or algorithm is not self.algorithm:
            self._build(tree, usage, extra, algorithm)

    def _all_factors(self, usage: Mapping[Key, float],
                     algorithm: FairshareAlgorithm) -> tuple[dict[Key, float], dict[Key, float]]:
        vals = self._usage(usage)
        if algorithm is FairshareAlgorithm.CLASSIC:
            assert self.index is not None
            for node, v in zip(self.nodes, vals, strict=True):
                node.usage = v
            self.fairshare = classic_factors(self.index)
            return self.fairshare, self.assoc
        lf = self._level_values(vals)
        if self.visited and self._same_ranking(lf):
            self.hits += 1
        else:
            self._rank(lf)
        return self.fairshare, self.assoc

    def _build(self, tree: AccountTree, usage: Mapping[Key, float], extra: frozenset[Key],
               algorithm: FairshareAlgorithm) -> None:
        index = build_tree(tree, usage, extra)
        self.index, self.extra, self.algorithm = index, extra, algorithm
        nodes: list[AssocNode] = [index.root]
        span: list[tuple[int, int]] = []
        k = 0
        while k < len(nodes):  # breadth first: each sibling list gets consecutive numbers
            node = nodes[k]
            start = len(nodes)
            if node.key is None:
                nodes.extend(node.children)
            span.append((start, len(nodes)))
            k += 1
        self.nodes, self.span = nodes, span
        self.is_user = [n.key is not None for n in nodes]
        self.keys = [n.key for n in nodes]
        order = sorted(range(len(nodes)), key=lambda i: (
            nodes[i].key is None, nodes[i].name, nodes[i].key or ()))
        srank = [0] * len(nodes)
        for r, i in enumerate(order):
            srank[i] = r
        self.srank = srank
        self.leaf_pos = [i for i, n in enumerate(nodes) if n.key is not None]
        self.leaf_keys = [k2 for k2 in (nodes[i].key for i in self.leaf_pos) if k2 is not None]
        runs: list[tuple[int, int, int]] = []
        for a, pos in enumerate(self.leaf_pos):
            if runs and runs[-1][1] == pos:
                s0, _, a0 = runs[-1]
                runs[-1] = (s0, pos + 1, a0)
            else:
                runs.append((pos, pos + 1, a))
        self.runs = runs
        post: list[int] = []

        def walk(i: int) -> None:
            s, e = span[i]
            for c in range(s, e):
                if not self.is_user[c]:
                    walk(c)
            post.append(i)

        walk(0)
        self.post = post
        groups: list[tuple[int, int, int, list[float] | None, list[float | None]]] = []
        for i in range(len(nodes)):
            if self.is_user[i]:
                continue
            s, e = span[i]
            total_shares = sum(n.shares for n in nodes[s:e])
            shares: list[float | None] = [
                None if n.shares <= 0 or total_shares <= 0 else n.shares / total_shares
                for n in nodes[s:e]]
            fast = None if any(x is None for x in shares) else [x for x in shares if x is not None]
            groups.append((i, s, e, fast, shares))
        self.groups = groups
        self.flat = flat_list(span, self.is_user, self.keys, len(index.leaves),
                              {g[0]: g[4] for g in groups})
        max_ap = max((n.priority for n in index.leaves.values()), default=0)
        self.assoc = ({k2: max(n.priority, 0) / max_ap for k2, n in index.leaves.items()}
                      if max_ap > 0 else {})
        self.visited = []

    def _usage(self, usage: Mapping[Key, float]) -> list[float]:
        vals: list[float] = [0.0] * len(self.nodes)
        leaf = list(map(float, map(usage.get, self.leaf_keys, repeat(0.0))))
        for s, e, a in self.runs:  # consecutive leaves in one slice each
            vals[s:e] = leaf[a:a + e - s]
        span = self.span
        for i in self.post:
            s, e = span[i]
            vals[i] = sum(vals[s:e])
        return vals

    def _level_values(self, vals: list[float]) -> list[float]:
        """``fair_tree.level_fairshare`` of every node (root: 0), by node number."""
        lf: list[float] = [0.0]
        for parent, s, e, fast, shares in self.groups:
            pu = vals[parent]
            us = vals[s:e]
            if fast is not None and pu > 0 and (s == e or min(us) > 0):
                lf.extend(map(truediv, fast, map(truediv, us, repeat(pu))))
                continue
            if fast is not None and pu > 0:  # some children without usage
                lf.extend([sh / (u / pu) if u > 0 else _INF
                           for sh, u in zip(fast, us, strict=True)])
                continue
            lf.extend([0.0 if sh is None else _INF if u <= 0 or pu <= 0 else sh / (u / pu)
                       for sh, u in zip(shares, us, strict=True)])
        return lf

    def _same_ranking(self, lf: list[float]) -> bool:
        get = lf.__getitem__
        for ordered, ties in self.visited:
            if len(ordered) < 2:
                continue
            v = list(map(get, ordered))
            if list(map(eq, v, v[1:])) != ties or not all(map(ge, v, v[1:])):
                return False
        return True

    def _rank(self, lf: list[float]) -> None:
        """Fair Tree's depth-first ranking (``fair_tree.fair_tree_factors``) on numbers."""
        self.misses += 1
        assert self.index is not None
        user_count = len(self.index.leaves)  # as fair_tree_factors counts them
        out: dict[Key, float] = {}
        visited: list[tuple[list[int], list[bool]]] = []
        self.fairshare, self.visited = out, visited
        if user_count == 0:
            return
        is_user, keys, span, srank = self.is_user, self.keys, self.span, self.srank
        get = lf.__getitem__
        rank = remaining = user_count

        def visit(siblings: list[int], account_tied: bool) -> None:
            nonlocal rank, remaining
            ordered = [i for _, _, i in sorted(zip(
                map(neg, map(get, siblings)), map(srank.__getitem__, siblings), siblings,
                strict=True))]
            v = list(map(get, ordered))
            visited.append((ordered, list(map(eq, v, v[1:]))))
            ties = visited[-1][1]
            n = len(ordered)
            if n and all(map(is_user.__getitem__, ordered)):
                # users only: position p gets ``remaining - p`` unless it ties with the one
                # before, which keeps the last rank given (the incoming one at the start)
                last = list(accumulate([-1 if t else p for p, t in
                                        enumerate([account_tied, *ties])], max))
                start, carried = remaining, rank
                ranks = [carried if b < 0 else start - b for b in last]
                out.update(zip(map(keys.__getitem__, ordered),  # type: ignore[arg-type]
                               map(truediv, ranks, repeat(user_count)), strict=True))
                rank = ranks[-1]
                remaining -= n
                return
            prev: float | None = None
            i = 0
            while i < n:
                node = ordered[i]
                value = v[i]
                tied = account_tied if i == 0 else prev == value
                if is_user[node]:
                    if not tied:
                        rank = remaining
                    key = keys[node]
                    assert key is not None
                    out[key] = rank / user_count
                    remaining -= 1
                    i += 1
                else:
                    s, e = span[node]
                    merged = list(range(s, e))
                    j = i + 1
                    while j < n and not is_user[ordered[j]] and v[j] == value:
                        s, e = span[ordered[j]]
                        merged.extend(range(s, e))
                        j += 1
                    visit(merged, tied)
                    i = j
                prev = value

        s, e = span[0]
        visit(list(range(s, e)), False)
