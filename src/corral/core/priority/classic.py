"""Classic fair share (Slurm's formula before Fair Tree): ``F = 2 ** (-UE / S)``.

Definitions (Slurm ``priority_multifactor`` documentation, "The Fair-share Factor"):

- normalized shares ``S`` of an association: its shares over the sum of its siblings'
  shares, times the parent's ``S`` (children of the root: just the first ratio);
- normalized usage ``UA``: its (decayed) usage over the usage of the whole tree;
- effective usage ``UE``: for children of the root ``UE = UA``; below that
  ``UE = UA + (UE_parent - UA) * shares / sum(sibling shares)``, so part of the parent
  account's usage is inherited by every child;
- ``F = 2 ** (-UE / S)``: 1.0 with no usage, 0.5 when usage exactly matches shares,
  towards 0 with over-use; ``S == 0`` gives 0.

Selected with ``SchedulerConfig.fairshare = FairshareAlgorithm.CLASSIC``; Fair Tree is the
default (see ``fair_tree``): with this formula a user's factor depends on the absolute
usage of unrelated accounts, and many small siblings dilute each other's shares.
``PriorityUsageResetPeriod`` is not modelled (decay is the only forgetting).

Invariant (tested): raising one association's usage never raises its factor.
"""

from __future__ import annotations

from corral.core.priority.assoc import AssocIndex, AssocNode


def classic_factors(index: AssocIndex) -> dict[tuple[str, str], float]:
    """``2 ** (-UE / S)`` for every user association of the tree."""
    total_usage = index.root.usage
    out: dict[tuple[str, str], float] = {}

    def visit(parent: AssocNode, parent_s: float, parent_ue: float, top: bool) -> None:
        sib_shares = sum(c.shares for c in parent.children)
        for c in parent.children:
            ratio = c.shares / sib_shares if sib_shares > 0 else 0.0
            s_norm = parent_s * ratio
            ua = c.usage / total_usage if total_usage > 0 else 0.0
            ue = ua if top else ua + (parent_ue - ua) * ratio
            if c.is_user:
                assert c.key is not None
                out[c.key] = 2.0 ** (-ue / s_norm) if s_norm > 0 else 0.0
            else:
                visit(c, s_norm, ue, False)

    visit(index.root, 1.0, 1.0, True)
    return out
