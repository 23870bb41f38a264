"""NUMA alignment that a task group demands of each of its tasks, inside one node.

The policies mirror the kubelet's Topology Manager (Volcano's task ``topologyPolicy``):

* ``single-numa-node`` (``NUMA_SINGLE``): each task gets all its cores, and its GPUs
  where the node's GPUs have NUMA affinity, from one NUMA domain. A node none of whose
  domains could ever hold one task is never a candidate.
* ``restricted`` (``NUMA_RESTRICTED``): each task's cores and GPUs come from no more
  domains than the *width* of the task on that node: the fewest domains of the node's
  hardware that could hold one task (cores, and GPUs with affinity), whatever is free
  now. A 6-core task on nodes of 4-core domains has width 2: it gets 2 domains, never 3.
* ``none``/``best-effort`` ask nothing here: ``corral.core.placement.within`` already
  takes a job's cores from as few domains as fit.

GPUs without NUMA affinity (``GpuSpec.numa`` unknown) belong to no domain and may go
with any task. Memory is not split by domain (it is counted per node).

Algorithm (deterministic): the node's tasks are placed one after another on its free
cores and GPUs. For each task, every set of ``width`` domains (each single domain for
``single-numa-node``), in lexicographic order of domain positions, whose free cores and
GPUs hold the task is a candidate; the best fit wins (fewest free cores in the set, then
fewest free GPUs, then the lowest positions), so partly used domains are filled before
whole ones are broken. Inside the set, GPUs attached to its domains come first (lowest
first), then GPUs of no domain; cores come from the set's domains with the most free
cores first, lowest ids first. ``slots`` returns each task's (core mask, GPU mask);
fewer tasks than asked when no more fit. Only free bits are returned, and the tasks'
masks are disjoint: nothing is allocated twice.
"""

from __future__ import annotations

from itertools import combinations

from corral.core.pool import Pool
from corral.core.shape import NUMA_NONE, NUMA_SINGLE

Slot = tuple[int, int]  # (core mask, GPU mask) of one task


def _lowest(mask: int, count: int) -> int:
    out = 0
    while mask and count > 0:
        low = mask & -mask
        out |= low
        mask ^= low
        count -= 1
    return out


def domains_of(pool: Pool, i: int) -> tuple[int, ...]:
    """Node ``i``'s NUMA domains as core masks (the whole node when it lists none)."""
    t = pool.table
    return t.domain_masks[i] or (t.full_core_mask[i],)


def _gpu_masks(pool: Pool, i: int, gpu_type: str | None, free: int,
               ndom: int) -> tuple[list[int], int]:
    """``free`` GPUs of node ``i`` (of ``gpu_type``) per domain position, and those of
    no domain."""
    t = pool.table
    if gpu_type is not None:
        free &= t.gpu_type_masks[i].get(gpu_type, 0)
    per = [0] * ndom
    loose = 0
    numa = t.gpu_numa[i]
    m = free
    while m:
        low = m & -m
        d = numa[low.bit_length() - 1]
        if 0 <= d < ndom:
            per[d] |= low
        else:
            loose |= low
        m ^= low
    return per, loose


def width(pool: Pool, i: int, cores: int, gpus: int, gpu_type: str | None) -> int:
    """The fewest domains of node ``i``'s hardware that hold ``cores`` cores and ``gpus``
    GPUs (GPUs of no domain count with any set); 0 when the whole node cannot.
    Memoized on the node table."""
    t = pool.table
    memo = t.memo.setdefault("numa_width", {})
    assert isinstance(memo, dict)
    key = (i, cores, gpus, gpu_type)
    got = memo.get(key)
    if got is not None:
        return int(got)
    doms = domains_of(pool, i)
    per, loose = _gpu_masks(pool, i, gpu_type, t.full_gpu_mask[i], len(doms))
    nloose = loose.bit_count()
    out = 0
    for m in range(1, len(doms) + 1):
        if any(sum(doms[d].bit_count() for d in ds) >= cores
               and sum(per[d].bit_count() for d in ds) + nloose >= gpus
               for ds in combinations(range(len(doms)), m)):
            out = m
            break
    if len(memo) > 100_000:
        memo.clear()
    memo[key] = out
    return out


def slots(pool: Pool, i: int, policy: int, count: int, cores: int, gpus: int,
          gpu_type: str | None, whole: bool = False) -> list[Slot]:
    """Up to ``count`` tasks of ``cores`` cores and ``gpus`` GPUs each on node ``i`` under
    ``policy`` (see the module docstring); ``whole``: on the node's hardware (an idle
    node taken whole) rather than its free resources."""
    if policy == NUMA_NONE or count <= 0:
        return []
    t = pool.table
    w = width(pool, i, cores, gpus, gpu_type)
    if w == 0 or (policy == NUMA_SINGLE and w != 1):
        return []
    doms = domains_of(pool, i)
    free_c = t.full_core_mask[i] if whole else pool.core_mask[i]
    free_g = t.full_gpu_mask[i] if whole else pool.gpu_mask[i]
    sets = list(combinations(range(len(doms)), w))
    out: list[Slot] = []
    while len(out) < count:
        per, loose = _gpu_masks(pool, i, gpu_type, free_g, len(doms))
        nloose = loose.bit_count()
        best: tuple[int, int, tuple[int, ...]] | None = None
        for ds in sets:
            nc = sum((free_c & doms[d]).bit_count() for d in ds)
            if nc < cores:
                continue
            ng = sum(per[d].bit_count() for d in ds)
            if ng + nloose < gpus:
                continue
            key = (nc, ng, ds)
            if best is None or key < best:
                best = key
        if best is None:
            break
        ds = best[2]
        g = 0
        for d in ds:
            g |= _lowest(per[d] & ~g, gpus - g.bit_count())
        g |= _lowest(loose, gpus - g.bit_count())
        c = 0
        for d in sorted(ds, key=lambda k: (-(free_c & doms[k]).bit_count(), k)):
            c |= _lowest(free_c & doms[d], cores - c.bit_count())
            if c.bit_count() >= cores:
                break
        out.append((c, g))
        free_c &= ~c
        free_g &= ~g
    return out
