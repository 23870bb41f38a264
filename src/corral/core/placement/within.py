"""Inside one node: which exact cores and GPUs a job gets (``select/cons_tres`` style).

Algorithm (deterministic, lowest ids on ties):

* GPUs first, when any are wanted: free GPUs of the requested type are grouped by the
  NUMA domain they are attached to; the groups with the most free GPUs are used first, so a
  job's GPUs share as few domains as possible.
* Cores from as few NUMA domains (one per socket by default) as fit: when one domain can
  hold them all, the best-fitting domain (fewest free cores that still fit) is used;
  otherwise the domains with the most free cores are filled in turn. Domains that hold
  the job's GPUs come first, so cores get CPU affinity to their GPUs.
* Exclusive and whole-node picks take every core, GPU, MB of memory and GRES unit.

Invariant: only free bits are ever returned, so two jobs never share a core or a GPU.
"""

from __future__ import annotations

from corral.core.pool import NodeUse, Pool


def _take_lowest(mask: int, count: int) -> int:
    out = 0
    while mask and count:
        low = mask & -mask
        out |= low
        mask ^= low
        count -= 1
    return out


def pick_gpus(pool: Pool, i: int, count: int, gpu_type: str | None) -> tuple[int, list[int]]:
    """GPU bitmask of ``count`` free GPUs on node ``i`` and the NUMA domains they sit on."""
    t = pool.table
    free = pool.gpu_mask[i]
    if gpu_type is not None:
        free &= t.gpu_type_masks[i].get(gpu_type, 0)
    if count <= 0:
        return 0, []
    if free.bit_count() == count:
        chosen = free
    else:
        numa = t.gpu_numa[i]
        groups: dict[int, int] = {}
        m = free
        while m:
            low = m & -m
            p = low.bit_length() - 1
            groups[numa[p]] = groups.get(numa[p], 0) | low
            m ^= low
        order = sorted(groups.items(), key=lambda kv: (-kv[1].bit_count(), kv[0]))
        chosen = 0
        left = count
        for _, g in order:
            take = _take_lowest(g, left)
            chosen |= take
            left -= take.bit_count()
            if not left:
                break
    doms: list[int] = []
    m = chosen
    numa = t.gpu_numa[i]
    while m:
        low = m & -m
        d = numa[low.bit_length() - 1]
        if d >= 0 and d not in doms:
            doms.append(d)
        m ^= low
    return chosen, doms


def pick_cores(pool: Pool, i: int, count: int, prefer: list[int] | None = None) -> int:
    """Core bitmask of ``count`` free cores of node ``i`` from as few NUMA domains as fit."""
    free = pool.core_mask[i]
    if count >= free.bit_count():
        return free if count == free.bit_count() else 0
    domains = pool.table.domain_masks[i]
    if len(domains) <= 1:
        return _take_lowest(free, count)
    chosen = 0
    left = count
    if prefer:
        for d in prefer:
            take = _take_lowest(free & domains[d] & ~chosen, left)
            chosen |= take
            left -= take.bit_count()
            if not left:
                return chosen
    avail = [(free & dm & ~chosen) for dm in domains]
    best = -1
    best_n = 1 << 30
    for d, m in enumerate(avail):
        n = m.bit_count()
        if left <= n < best_n:
            best, best_n = d, n
    if best >= 0:
        return chosen | _take_lowest(avail[best], left)
    for d in sorted(range(len(avail)), key=lambda k: (-avail[k].bit_count(), k)):
        take = _take_lowest(avail[d], left)
        chosen |= take
        left -= take.bit_count()
        if not left:
            break
    if left:  # cores outside every listed domain
        chosen |= _take_lowest(free & ~chosen, left)
    return chosen


def node_use(
    pool: Pool,
    i: int,
    ncores: int,
    mem_mb: int,
    ngpus: int,
    gpu_type: str | None,
    gres: tuple[tuple[str, int], ...],
    whole: bool,
) -> NodeUse:
    """Exact resources for one node of a placement (not yet taken from ``pool``)."""
    t = pool.table
    if whole:
        gres_all = tuple(sorted(t.gres[i].items())) if t.gres[i] else ()
        return NodeUse(i, pool.core_mask[i], pool.mem_free[i], pool.gpu_mask[i], gres_all)
    gpu_bits, doms = pick_gpus(pool, i, ngpus, gpu_type) if ngpus else (0, [])
    core_bits = pick_cores(pool, i, ncores, doms)
    return NodeUse(i, core_bits, mem_mb, gpu_bits, gres)
