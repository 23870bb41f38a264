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
         "storage": "check its disk and mount options"}


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


def verdicts(nodes: list[NodeResult], links: list[LinkResult], lim: Limits) -> list[Verdict]:
    """Every outlier of a run, nodes first (sorted by subject within each kind)."""
    return node_verdicts(nodes, lim) + network_verdicts(links, lim)


def pairs_to_measure(nodes: list[str], max_pairs: int) -> list[tuple[str, str]]:
    """All pairs when there are at most ``max_pairs``; else a sample covering every node
    several times: node i with i+1, i+2, i+4, ... (a ring and its chords), deterministic."""
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
    return out
