"""Verdicts: each node and each link compared with the cluster's median and with limits.

Algorithm (pure; no I/O):

- **Network.** A node's *best* link (highest ping-pong bandwidth, lowest latency over its
  peers) says what its own NIC and cable can do: a slow node is slow to *every* peer, while
  a healthy node has at least one fast peer. A node whose best bandwidth is under
  ``min_relative`` x the median of the nodes' best bandwidths, or whose best latency is
  over ``max_latency_ratio`` x their median, is convicted ("to every peer"). A link between
  two unconvicted nodes that is itself slow is named as a link (a switch port, a cable).
  Absolute limits (``min_bandwidth_mb_s``, ``max_latency_us``) apply the same way.
- **Compute.** HPL Gflops and STREAM triad of each node against the median node
  (``min_relative``); HPL efficiency against the node's theoretical peak where it is known
  and ``min_hpl_efficiency`` is set.
- **Storage.** Each fio result (sequential MB/s, random IOPS; local and shared) against the
  median node and ``min_seq_mb_s`` / ``min_rand_iops``.
- **All nodes together.** HPL on every node at once against the number of nodes x the
  median node's HPL (``scaling``, under ``min_scaling`` is a verdict naming the
  interconnect), its efficiency against the sum of the nodes' peaks; fio from every node
  at once on the shared filesystem: each node's share of its own solo figure against the
  median share (``min_relative``), and the aggregate against one node alone.
- **GPUs.** The devices ``nvidia-smi`` lists against the node's configured GPUs (count;
  type when the configuration names one other than the generic ``gpu``), and each GPU's
  PCIe link width against the widest its card and slot can do (a card trained at x8 in
  an x16 slot moves data at half the speed; the link *generation* is not judged, idle
  GPUs lower it to save power).
- A check that failed on a node is a verdict of kind ``error``.

Invariant: a node with no verdict is healthy by every measurement it has; the median is
taken over the nodes that have the measurement (a median of one convicts nobody).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Limits:
    """``[checks]`` of corral.toml: what a node or link must reach."""

    min_relative: float = 0.7  # fraction of the median below which a node is an outlier
    max_latency_ratio: float = 2.0  # multiple of the median latency above which it is one
    min_bandwidth_mb_s: float | None = None
    max_latency_us: float | None = None
    min_hpl_efficiency: float | None = None  # 0..1, against the theoretical peak
    min_stream_gb_s: float | None = None
    min_seq_mb_s: float | None = None
    min_rand_iops: float | None = None
    min_scaling: float = 0.5  # all nodes' HPL under this fraction of n x the median node


@dataclass(frozen=True)
class LinkResult:
    a: str
    b: str
    latency_us: float | None = None
    bandwidth_mb_s: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class NodeResult:
    name: str
    hpl_gflops: float | None = None
    stream_gb_s: float | None = None
    peak_gflops: float | None = None
    storage: Mapping[str, float] = field(default_factory=dict)  # "local_seq_mb_s", ...
    errors: tuple[str, ...] = ()
    gpus: tuple[str, ...] | None = None  # device names nvidia-smi listed; None: not checked
    gpu_pcie: tuple[tuple[float | None, float | None], ...] = ()  # (lanes, max) per GPU

    @property
    def efficiency(self) -> float | None:
        if self.hpl_gflops is None or not self.peak_gflops:
            return None
        return self.hpl_gflops / self.peak_gflops


@dataclass(frozen=True)
class AllNodesResult:
    """The all-nodes job: HPL on every node together, fio from every node at once."""

    nodes: int
    ranks: int = 0
    hpl_gflops: float | None = None
    peak_gflops: float | None = None  # the sum of the nodes' peaks
    many_seq_mb_s: Mapping[str, float] = field(default_factory=dict)  # node -> MB/s
    errors: tuple[str, ...] = ()

    @property
    def efficiency(self) -> float | None:
        if self.hpl_gflops is None or not self.peak_gflops:
            return None
        return self.hpl_gflops / self.peak_gflops


@dataclass(frozen=True)
class Verdict:
    subject: str  # node name, or "a~b" for a link
    kind: str  # network | compute | memory | storage | error
    metric: str
    value: float | None
    reference: float | None  # the median or the configured limit
    message: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


HINTS = {"network": "check its link speed (NIC, cable, switch port)",
         "link": "check the switch port and cable between them",
         "compute": "check CPU frequency/throttling (power-saving mode, BIOS, cooling)",
         "memory": "check its memory configuration (DIMMs, NUMA, frequency)",
         "storage": "check its disk and mount options",
         "scaling": "check the interconnect (a slow link or switch port holds every rank "
                    "back) and the MPI transport",
         "shared": "check the file server and the nodes' mounts of it",
         "gpu": "check the driver (nvidia-smi), the cards and the node's configured gpus"}


def _median(values: Iterable[float | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return statistics.median(vs) if vs else None


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def best_links(links: Iterable[LinkResult]) -> dict[str, tuple[float | None, float | None]]:
    """Node -> (best bandwidth MB/s, best latency us) over its measured links."""
    bw: dict[str, list[float]] = {}
    lat: dict[str, list[float]] = {}
    for lk in links:
        for n in (lk.a, lk.b):
            bw.setdefault(n, [])
            lat.setdefault(n, [])
            if lk.bandwidth_mb_s is not None:
                bw[n].append(lk.bandwidth_mb_s)
            if lk.latency_us is not None:
                lat[n].append(lk.latency_us)
    return {n: (max(bw[n]) if bw[n] else None, min(lat[n]) if lat[n] else None) for n in bw}


def network_verdicts(links: list[LinkResult], lim: Limits) -> list[Verdict]:
    out: list[Verdict] = []
    for lk in links:
        if lk.error:
            out.append(Verdict(f"{lk.a}~{lk.b}", "error", "pingpong", None, None,
                               f"{lk.a}~{lk.b}: ping-pong failed: {lk.error}"))
    best = best_links(links)
    med_bw = _median(b for b, _ in best.values())
    med_lat = _median(lt for _, lt in best.values())
    convicted: set[str] = set()
    for node in sorted(best):
        bw, lat = best[node]
        if bw is not None and med_bw and len(best) > 2 and bw < lim.min_relative * med_bw:
            convicted.add(node)
            out.append(Verdict(node, "network", "bandwidth_mb_s", bw, med_bw,
                               f"{node}: ping-pong bandwidth to every peer at most "
                               f"{_pct(bw / med_bw)} of the median ({bw:.1f} vs {med_bw:.1f} "
                               f"MB/s) — {HINTS['network']}"))
        elif bw is not None and lim.min_bandwidth_mb_s is not None \
                and bw < lim.min_bandwidth_mb_s:
            convicted.add(node)
            out.append(Verdict(node, "network", "bandwidth_mb_s", bw, lim.min_bandwidth_mb_s,
                               f"{node}: ping-pong bandwidth to every peer at most {bw:.1f} "
                               f"MB/s, under the configured {lim.min_bandwidth_mb_s:g} MB/s — "
                               f"{HINTS['network']}"))
        if lat is not None and med_lat and len(best) > 2 \
                and lat > lim.max_latency_ratio * med_lat:
            convicted.add(node)
            out.append(Verdict(node, "network", "latency_us", lat, med_lat,
                               f"{node}: ping-pong latency to every peer at least "
                               f"{lat / med_lat:.1f}x the median ({lat:.1f} vs {med_lat:.1f} us)"
                               f" — {HINTS['network']}"))
        elif lat is not None and lim.max_latency_us is not None and lat > lim.max_latency_us:
            convicted.add(node)
            out.append(Verdict(node, "network", "latency_us", lat, lim.max_latency_us,
                               f"{node}: ping-pong latency to every peer at least {lat:.1f} us,"
                               f" over the configured {lim.max_latency_us:g} us — "
                               f"{HINTS['network']}"))
    med_link = _median(lk.bandwidth_mb_s for lk in links)
    for lk in links:
        if lk.a in convicted or lk.b in convicted or lk.bandwidth_mb_s is None:
            continue
        name = f"{lk.a}~{lk.b}"
        low_rel = med_link and len(links) > 2 and lk.bandwidth_mb_s < lim.min_relative * med_link
        low_abs = lim.min_bandwidth_mb_s is not None and lk.bandwidth_mb_s < lim.min_bandwidth_mb_s
        if low_rel or low_abs:
            ref = med_link if low_rel else lim.min_bandwidth_mb_s
            assert ref is not None
            out.append(Verdict(name, "link", "bandwidth_mb_s", lk.bandwidth_mb_s, ref,
                               f"link {name}: ping-pong bandwidth {lk.bandwidth_mb_s:.1f} MB/s,"
                               f" {_pct(lk.bandwidth_mb_s / ref)} of the "
                               f"{'median link' if low_rel else 'configured minimum'} while "
                               f"both nodes are fast to others — {HINTS['link']}"))
    return out


def _relative(nodes: list[NodeResult], kind: str, metric: str, label: str, unit: str,
              values: Mapping[str, float | None], lim: Limits,
              absolute: float | None) -> list[Verdict]:
    out: list[Verdict] = []
    med = _median(values.values())
    for n in nodes:
        v = values.get(n.name)
        if v is None:
            continue
        if med and v < lim.min_relative * med:
            out.append(Verdict(n.name, kind, metric, v, med,
                               f"{n.name}: {label} {_pct(v / med)} of the median node "
                               f"({v:.3g} vs {med:.3g} {unit}) — {HINTS[kind]}"))
        elif absolute is not None and v < absolute:
            out.append(Verdict(n.name, kind, metric, v, absolute,
                               f"{n.name}: {label} {v:.3g} {unit}, under the configured "
                               f"{absolute:g} {unit} — {HINTS[kind]}"))
    return out


STORAGE_METRICS = (("local_seq_mb_s", "fio sequential write (local)", "MB/s"),
                   ("local_rand_iops", "fio random read IOPS (local)", "IOPS"),
                   ("shared_seq_mb_s", "fio sequential write (shared)", "MB/s"),
                   ("shared_rand_iops", "fio random read IOPS (shared)", "IOPS"))


def node_verdicts(nodes: list[NodeResult], lim: Limits) -> list[Verdict]:
    out: list[Verdict] = []
    for n in nodes:
        for err in n.errors:
            out.append(Verdict(n.name, "error", "job", None, None, f"{n.name}: {err}"))
    out += _relative(nodes, "compute", "hpl_gflops", "HPL", "Gflops",
                     {n.name: n.hpl_gflops for n in nodes}, lim, None)
    if lim.min_hpl_efficiency is not None:
        flagged = {v.subject for v in out if v.kind == "compute"}
        for n in nodes:
            eff = n.efficiency
            if eff is not None and eff < lim.min_hpl_efficiency and n.name not in flagged:
                out.append(Verdict(n.name, "compute", "hpl_efficiency", eff,
                                   lim.min_hpl_efficiency,
                                   f"{n.name}: HPL efficiency {_pct(eff)} of the theoretical "
                                   f"peak ({n.peak_gflops:.1f} Gflops), under the configured "
                                   f"{_pct(lim.min_hpl_efficiency)} — {HINTS['compute']}"))
    out += _relative(nodes, "memory", "stream_gb_s", "STREAM triad", "GB/s",
                     {n.name: n.stream_gb_s for n in nodes}, lim, lim.min_stream_gb_s)
    for key, label, unit in STORAGE_METRICS:
        absolute = lim.min_seq_mb_s if key.endswith("mb_s") else lim.min_rand_iops
        out += _relative(nodes, "storage", key, label, unit,
                         {n.name: n.storage.get(key) for n in nodes}, lim, absolute)
    return out


ALL = "all-nodes"


def all_nodes_verdicts(together: AllNodesResult, nodes: list[NodeResult],
                       lim: Limits) -> list[Verdict]:
    out = [Verdict(ALL, "error", "job", None, None, f"{ALL}: {e}") for e in together.errors]
    k = together.nodes
    med = _median(n.hpl_gflops for n in nodes)
    if together.hpl_gflops is not None and med:
        expect = k * med
        ratio = together.hpl_gflops / expect
        if ratio < lim.min_scaling:
            out.append(Verdict(ALL, "scaling", "hpl_gflops", together.hpl_gflops, expect,
                               f"{ALL}: HPL on the {k} nodes together {together.hpl_gflops:.3g}"
                               f" Gflops, {_pct(ratio)} of {k} x the median node "
                               f"({expect:.3g} Gflops) — {HINTS['scaling']}"))
    eff = together.efficiency
    if eff is not None and lim.min_hpl_efficiency is not None and eff < lim.min_hpl_efficiency:
        out.append(Verdict(ALL, "scaling", "hpl_efficiency", eff, lim.min_hpl_efficiency,
                           f"{ALL}: HPL efficiency {_pct(eff)} of the nodes' summed peak "
                           f"({together.peak_gflops:.1f} Gflops), under the configured "
                           f"{_pct(lim.min_hpl_efficiency)} — {HINTS['scaling']}"))
    solo = {n.name: n.storage.get("shared_seq_mb_s") for n in nodes}
    shares = {n: v / s for n, v in together.many_seq_mb_s.items()
              if (s := solo.get(n)) and v is not None}
    med_share = _median(shares.values())
    for n in sorted(shares):
        if med_share and len(shares) > 2 and shares[n] < lim.min_relative * med_share:
            out.append(Verdict(n, "storage", "many_seq_mb_s", together.many_seq_mb_s[n],
                               solo[n], f"{n}: fio sequential write (shared) with {k} nodes "
                               f"at once {together.many_seq_mb_s[n]:.3g} MB/s, "
                               f"{_pct(shares[n])} of its own alone while the median node "
                               f"kept {_pct(med_share)} — {HINTS['storage']}"))
    total = sum(together.many_seq_mb_s.values())
    med_solo = _median(solo.values())
    if together.many_seq_mb_s and med_solo and total < lim.min_relative * med_solo:
        out.append(Verdict(ALL, "storage", "aggregate_seq_mb_s", total, med_solo,
                           f"{ALL}: the shared filesystem took {total:.3g} MB/s from {k} nodes"
                           f" writing at once, {_pct(total / med_solo)} of what the median "
                           f"node wrote alone ({med_solo:.3g} MB/s) — {HINTS['shared']}"))
    return out


def gpu_verdicts(nodes: list[NodeResult],
                 expected: Mapping[str, tuple[int, Mapping[str, int]]]) -> list[Verdict]:
    """Configured GPUs (node -> (count, {type: count})) against what the node listed."""
    out: list[Verdict] = []
    for n in nodes:
        if n.gpus is None:
            continue
        want, types = expected.get(n.name, (0, {}))
        if len(n.gpus) != want:
            out.append(Verdict(n.name, "gpu", "gpu_count", float(len(n.gpus)), float(want),
                               f"{n.name}: nvidia-smi lists {len(n.gpus)} GPU(s), the "
                               f"configuration has {want} — {HINTS['gpu']}"))
            continue
        for i, (cur, top) in enumerate(n.gpu_pcie):
            if cur is not None and top is not None and cur < top:
                out.append(Verdict(n.name, "gpu", "pcie_width", cur, top,
                                   f"{n.name}: GPU {i} PCIe link x{cur:.0f} of its x{top:.0f} "
                                   "— reseat the card, check the slot and riser"))
        named = {t: c for t, c in types.items() if t and t != "gpu"}
        for t, c in sorted(named.items()):
            have = sum(1 for g in n.gpus if t.lower() in g.lower().replace(" ", "_")
                       or t.lower() in g.lower())
            if have < c:
                out.append(Verdict(n.name, "gpu", "gpu_type", float(have), float(c),
                                   f"{n.name}: {have} of the {c} configured '{t}' GPU(s) "
                                   f"found (nvidia-smi: {', '.join(n.gpus)}) — {HINTS['gpu']}"))
    return out


def verdicts(nodes: list[NodeResult], links: list[LinkResult], lim: Limits,
             together: AllNodesResult | None = None,
             expected_gpus: Mapping[str, tuple[int, Mapping[str, int]]] | None = None,
             ) -> list[Verdict]:
    """Every outlier of a run, nodes first (sorted by subject within each kind)."""
    out = node_verdicts(nodes, lim) + network_verdicts(links, lim)
    if together is not None:
        out += all_nodes_verdicts(together, nodes, lim)
    return out + gpu_verdicts(nodes, expected_gpus or {})


def pairs_to_measure(nodes: list[str], max_pairs: int,
                     leaf_of: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """All pairs when there are at most ``max_pairs``; else a sample covering every node
    several times: node i with i+1, i+2, i+4, ... (a ring and its chords), deterministic.

    With a topology (``leaf_of``: node -> leaf switch, from ``[[switches]]``) the sample
    also covers every switch: each leaf with a checked node gets at least one measured
    pair inside it (when it has two nodes) and one to another leaf (its first node with
    the first node of the next leaf, in name order), added when the ring did not already
    measure one. Coverage wins over ``max_pairs``: it adds at most two pairs per leaf."""
    ns = sorted(nodes)
    k = len(ns)
    every = [(ns[i], ns[j]) for i in range(k) for j in range(i + 1, k)]
    if len(every) <= max_pairs:
        return every
    out: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    step = 1
    while step < k and (not out or len(out) + k <= max_pairs):
        for i in range(k):
            a, b = ns[i], ns[(i + step) % k]
            key = (min(a, b), max(a, b))
            if a != b and key not in seen:
                seen.add(key)
                out.append(key)
        step *= 2
    if leaf_of:
        out += _switch_cover(ns, leaf_of, seen)
    return out


def _switch_cover(ns: list[str], leaf_of: Mapping[str, str],
                  seen: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """Pairs to add so that every leaf switch has an inner and an inter-switch pair."""
    leaves: dict[str, list[str]] = {}
    for n in ns:
        leaves.setdefault(leaf_of.get(n, ""), []).append(n)
    names = sorted(leaves)
    added: list[tuple[str, str]] = []

    def add(a: str, b: str) -> None:
        key = (min(a, b), max(a, b))
        if key not in seen:
            seen.add(key)
            added.append(key)

    for i, leaf in enumerate(names):
        members = leaves[leaf]
        inner = any(leaf_of.get(a, "") == leaf and leaf_of.get(b, "") == leaf
                    for a, b in seen)
        if len(members) > 1 and not inner:
            add(members[0], members[1])
        outer = any((leaf_of.get(a, "") == leaf) != (leaf_of.get(b, "") == leaf)
                    for a, b in seen)
        if len(names) > 1 and not outer:
            add(members[0], leaves[names[(i + 1) % len(names)]][0])
    return added


def leaf_switches(config: Mapping[str, Any]) -> dict[str, str]:
    """Node -> leaf switch from a configuration as JSON (``GET /config``): the ``nodes`` of
    ``[[switches]]``, and ``switch`` of ``[[nodes]]`` entries (which win)."""
    from corral.core.parse.hostlist import expand

    out: dict[str, str] = {}
    for sw in config.get("switches") or ():
        if sw.get("nodes"):
            for n in expand(str(sw["nodes"])):
                out[n] = str(sw["name"])
    for node in config.get("nodes") or ():
        if node.get("switch") and node.get("name"):
            for n in expand(str(node["name"])):
                out[n] = str(node["switch"])
    return out
