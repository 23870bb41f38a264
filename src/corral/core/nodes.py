"""``NodeTable``: static per-node data of a snapshot, indexed and cached across cycles.

Everything here depends only on the nodes' hardware (``NodeSpec``) and on partition
membership, never on allocations or node state, so one table serves many cycles. Node sets
are Python ints used as bitmasks (bit ``i`` = node index ``i``): intersections, counts and
"lowest index first" scans then run at C speed even for thousands of nodes.

Node indexes follow the snapshot order, stably sorted by ``NodeSpec.weight`` (Slurm
allocates low-weight nodes first), so "lowest index" means "lowest weight, then listed
first". Cores are numbered per node as in ``NodeSpec`` (socket-major); GPUs by their
position in ``NodeSpec.gpus`` (bit ``p`` of a GPU mask = ``spec.gpus[p]``).

``node_table(snapshot)`` returns the cached table when the nodes and partitions are the
same objects as in an earlier cycle, or equal to them (a cheap identity-first comparison),
and builds a new one otherwise. The cache is a bounded memo: results never depend on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, islice
from itertools import count as itertools_count

from corral.core.model.node import Node, NodeSpec, NodeState
from corral.core.model.partition import Partition
from corral.core.parse.constraint import compile_constraint

#: node states in which a node takes new work (ALLOCATED nodes are full, not unavailable)
UP_STATES = frozenset({NodeState.IDLE, NodeState.MIXED, NodeState.ALLOCATED})


def iter_bits(mask: int) -> list[int]:
    """Indexes of the set bits of ``mask``, lowest first."""
    out: list[int] = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


_BITS: dict[int, tuple[int, ...]] = {}


def bits_of(mask: int) -> tuple[int, ...]:
    """``iter_bits`` memoized for the large masks (partitions, up nodes) queried repeatedly."""
    got = _BITS.get(mask)
    if got is None:
        got = tuple(iter_bits(mask))
        if len(_BITS) > 256:
            _BITS.clear()
        _BITS[mask] = got
    return got


def lowest_bits(mask: int, count: int) -> list[int]:
    """The ``count`` lowest set bits of ``mask`` (fewer when it has fewer). A few bits are
    peeled off one by one; more are read from the binary digits of 256-bit slices at C
    level (``compress`` over the reversed digits), the same list either way."""
    if count <= 8:
        out: list[int] = []
        while mask and count:
            low = mask & -mask
            out.append(low.bit_length() - 1)
            mask ^= low
            count -= 1
        return out
    out = []
    base = 0
    while mask and count > 0:
        chunk = mask & _SLICE_MASK
        if chunk:
            got = list(islice(compress(itertools_count(base),
                                       bin(chunk)[:1:-1].encode().translate(_DIGITS)), count))
            out += got
            count -= len(got)
        mask >>= _SLICE
        base += _SLICE
    return out


_SLICE = 256
_SLICE_MASK = (1 << _SLICE) - 1
_DIGITS = bytes.maketrans(b"01", b"\x00\x01")  # binary digits as false/true bytes


def mask_of(bits: Sequence[int]) -> int:
    m = 0
    for b in bits:
        m |= 1 << b
    return m


class NodeTable:
    """Static, indexed view of the cluster's nodes (see the module docstring)."""

    __slots__ = (
        "specs", "names", "index", "cores", "tpc", "mem", "ngpus", "full_core_mask",
        "full_gpu_mask", "domain_masks", "gpu_numa", "gpu_types", "gpu_ids", "gpu_type_masks",
        "gres", "features", "switch_of", "switch_names", "switch_masks", "switch_up", "part_masks",
        "partitions", "class_of", "class_masks", "class_specs", "unit_mask", "all_mask",
        "max_cores", "max_gpus", "_feature_cache", "core_domain", "gpu_type_nodes",
        "has_gres", "memo",
    )

    def __init__(self, nodes: Sequence[Node], partitions: Sequence[Partition]) -> None:
        order = sorted(range(len(nodes)), key=lambda k: nodes[k].spec.weight)
        specs = [nodes[k].spec for k in order]
        self.specs: list[NodeSpec] = specs
        self.names: list[str] = [s.name for s in specs]
        self.index: dict[str, int] = {n: i for i, n in enumerate(self.names)}
        self.cores: list[int] = [s.cores for s in specs]
        self.tpc: list[int] = [max(1, s.threads_per_core) for s in specs]
        self.mem: list[int] = [s.mem_mb for s in specs]
        self.ngpus: list[int] = [len(s.gpus) for s in specs]
        self.full_core_mask: list[int] = [(1 << c) - 1 for c in self.cores]
        self.full_gpu_mask: list[int] = [(1 << g) - 1 for g in self.ngpus]
        self.all_mask: int = (1 << len(specs)) - 1
        self.max_cores: int = max(self.cores, default=0)
        self.max_gpus: int = max(self.ngpus, default=0)
        # NUMA domains as core masks (one per socket when the spec gives none)
        self.domain_masks: list[tuple[int, ...]] = []
        self.core_domain: list[dict[int, int]] = []  # domain id -> position in domain_masks
        for s in specs:
            doms = s.numa_domains()
            self.domain_masks.append(
                tuple(mask_of([c for c in d.cores if c < s.cores]) for d in doms)
            )
            self.core_domain.append({d.id: k for k, d in enumerate(doms)})
        self.gpu_numa: list[tuple[int, ...]] = []  # per GPU position: domain position or -1
        self.gpu_types: list[tuple[str, ...]] = [tuple(g.type for g in s.gpus) for s in specs]
        self.gpu_ids: list[tuple[int, ...]] = [tuple(g.index for g in s.gpus) for s in specs]
        self.gpu_type_masks: list[dict[str, int]] = []
        self.gpu_type_nodes: dict[str, int] = {}
        for i, s in enumerate(specs):
            pos = self.core_domain[i]
            self.gpu_numa.append(
                tuple(pos.get(g.numa, -1) if g.numa is not None else -1 for g in s.gpus)
            )
            tm: dict[str, int] = {}
            for p, g in enumerate(s.gpus):
                tm[g.type] = tm.get(g.type, 0) | (1 << p)
                self.gpu_type_nodes[g.type] = self.gpu_type_nodes.get(g.type, 0) | (1 << i)
            self.gpu_type_masks.append(tm)
        self.gres: list[dict[str, int]] = [dict(s.gres) for s in specs]
        self.has_gres: bool = any(self.gres)
        self.features: list[frozenset[str]] = [s.features | {s.arch} for s in specs]
        # switches
        self.switch_names: list[str] = []
        sw_index: dict[str, int] = {}
        self.switch_of: list[int] = []
        self.switch_masks: list[int] = []
        self.switch_up: list[tuple[str, ...]] = []  # per leaf: the switches above it
        for i, s in enumerate(specs):
            name = s.switch if s.switch is not None else ""
            k = sw_index.get(name)
            if k is None:
                k = len(self.switch_names)
                sw_index[name] = k
                self.switch_names.append(name)
                self.switch_masks.append(0)
                self.switch_up.append(s.uplinks if name else ())
            self.switch_of.append(k)
            self.switch_masks[k] |= 1 << i
        # partitions: listed nodes plus nodes that name the partition
        self.partitions: dict[str, Partition] = {p.name: p for p in partitions}
        self.part_masks: dict[str, int] = {p.name: 0 for p in partitions}
        for part in partitions:
            m = 0
            for n in part.nodes:
                k2 = self.index.get(n)
                if k2 is not None:
                    m |= 1 << k2
            self.part_masks[part.name] = m
        for k, pos_ in enumerate(order):
            for pname in nodes[pos_].partitions:
                if pname in self.part_masks:
                    self.part_masks[pname] |= 1 << k
        # classes of identical hardware
        class_ids: dict[tuple[object, ...], int] = {}
        self.class_of: list[int] = []
        self.class_masks: list[int] = []
        self.class_specs: list[NodeSpec] = []
        self.unit_mask: int = 0
        for i, s in enumerate(specs):
            key = (s.sockets, s.cores_per_socket, s.threads_per_core, s.mem_mb,
                   tuple((g.type, g.numa) for g in s.gpus), s.gres, self.features[i])
            c = class_ids.get(key)
            if c is None:
                c = len(self.class_specs)
                class_ids[key] = c
                self.class_specs.append(s)
                self.class_masks.append(0)
            self.class_of.append(c)
            self.class_masks[c] |= 1 << i
            if s.cores == 1 and not s.gpus and not s.gres:
                self.unit_mask |= 1 << i
        self._feature_cache: dict[str, int] = {}
        self.memo: dict[str, object] = {}  # per-table memos of other modules

    def __len__(self) -> int:
        return len(self.specs)

    def feature_mask(self, expr: str | None) -> int:
        """Nodes whose features (plus the CPU arch) satisfy the constraint ``expr``.

        Raises ``ConstraintError`` (a ``ValueError``) for a malformed expression.
        """
        if not expr:
            return self.all_mask
        m = self._feature_cache.get(expr)
        if m is None:
            match = compile_constraint(expr)
            m = 0
            for i, f in enumerate(self.features):
                if match(f):
                    m |= 1 << i
            if len(self._feature_cache) < 4096:
                self._feature_cache[expr] = m
        return m

    def names_mask(self, names: Sequence[str]) -> tuple[int, list[str]]:
        """Mask of the named nodes and the names that are not nodes of this cluster."""
        m = 0
        unknown: list[str] = []
        for n in names:
            k = self.index.get(n)
            if k is None:
                unknown.append(n)
            else:
                m |= 1 << k
        return m, unknown

    def up_mask(self, nodes: Sequence[Node]) -> int:
        m = 0
        index = self.index
        for n in nodes:
            if n.state in UP_STATES:
                m |= 1 << index[n.spec.name]
        return m


_CacheEntry = tuple[Sequence[Node], Sequence[Partition], NodeTable, int]
_CACHE: list[_CacheEntry] = []
_CACHE_SIZE = 4


def node_table(nodes: Sequence[Node], partitions: Sequence[Partition]) -> tuple[NodeTable, int]:
    """The (cached) table for these nodes and partitions, and the mask of nodes that are up."""
    for entry in _CACHE:
        if entry[0] is nodes and entry[1] is partitions:
            return entry[2], entry[3]
    table: NodeTable | None = None
    for entry in _CACHE:
        old_nodes, old_parts, old_table, _ = entry
        if len(old_nodes) == len(nodes) and (old_parts is partitions or old_parts == partitions):
            pairs = list(zip(old_nodes, nodes, strict=True))
            if all(a.spec is b.spec or a.spec == b.spec for a, b in pairs) and all(
                a.partitions == b.partitions for a, b in pairs
            ):
                table = old_table
                break
    if table is None:
        table = NodeTable(nodes, partitions)
    up = table.up_mask(nodes)
    _CACHE.insert(0, (nodes, partitions, table, up))
    del _CACHE[_CACHE_SIZE:]
    return table, up
