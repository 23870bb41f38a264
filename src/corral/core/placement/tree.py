"""Switch-tree choice for topology placement: the lowest switch whose subtree holds the job.

Algorithm (the idea of Slurm's ``topology/tree`` plugin, our own code). Leaf switches are
where nodes hang; ``NodeSpec.uplinks`` lists the switches above a leaf, nearest first. When
no single leaf switch can hold a multi-node job, every upper switch is a candidate: its
*level* is the longest leaf-to-switch path below it (1 = directly above leaves), its
*capacity* the sum of its usable leaves' capacities. The job goes under the candidate of
lowest level that holds it (ties: the smallest sufficient capacity — best fit — then the
name), and inside that subtree takes leaves from the largest down, so it spans as few
leaves as possible and its traffic crosses as few switch levels as possible.

Invariants: the chosen leaves always include every leaf that holds a required node; the
choice depends only on the arguments (deterministic); ``None`` means no subtree holds the
job, and the caller then falls back to the flat fewest-leaves choice over all leaves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def subtree_leaves(values: Mapping[int, int], need: int, required: set[int],
                   uplinks: Sequence[tuple[str, ...]], leaf_names: Sequence[str]
                   ) -> list[int] | None:
    """Leaf switch indices to place on, or ``None`` if no upper switch's subtree suffices.

    ``values``: usable capacity per leaf index (only leaves with some); ``need``: the
    capacity the job needs, in the same unit; ``required``: leaves that must be used;
    ``uplinks[k]``: switches above leaf ``k``; ``leaf_names[k]``: its name.
    """
    level: dict[str, int] = {}
    members: dict[str, list[int]] = {}
    for k in values:
        for pos, sw in enumerate(uplinks[k]):
            level[sw] = max(level.get(sw, 0), pos + 1)
            members.setdefault(sw, []).append(k)
    best: tuple[int, int, str] | None = None
    for sw, leaves in members.items():
        total = sum(values[k] for k in leaves)
        if total < need or not required <= set(leaves):
            continue
        key = (level[sw], total, sw)
        if best is None or key < best:
            best = key
    if best is None:
        return None
    leaves = sorted(members[best[2]],
                    key=lambda k: (k not in required, -values[k], leaf_names[k]))
    chosen: list[int] = []
    got = 0
    for k in leaves:
        if got >= need and k not in required:
            break
        chosen.append(k)
        got += values[k]
    return chosen
