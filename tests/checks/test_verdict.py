"""Verdicts: outliers against the median and the configured limits (pure)."""

from __future__ import annotations

import itertools

from corral.checks.verdict import (
    Limits,
    LinkResult,
    NodeResult,
    pairs_to_measure,
    verdicts,
)

FAST = 1000.0


def mesh(names: list[str], bw: dict[str, float] | None = None,
         lat: dict[str, float] | None = None) -> list[LinkResult]:
    """Every pair; a link is as slow as its slower end (``bw``/``lat`` per node)."""
    bw, lat = bw or {}, lat or {}
    return [LinkResult(a, b, max(lat.get(a, 2.0), lat.get(b, 2.0)),
                       min(bw.get(a, FAST), bw.get(b, FAST)))
            for a, b in itertools.combinations(names, 2)]


NODES = ["n01", "n02", "n03", "n04"]


def test_a_slow_nic_convicts_its_node_not_its_peers() -> None:
    out = verdicts([], mesh(NODES, bw={"n03": 110.0}), Limits())
    assert [(v.subject, v.kind, v.metric) for v in out] == [("n03", "network",
                                                              "bandwidth_mb_s")]
    assert out[0].message == ("n03: ping-pong bandwidth to every peer at most 11% of the "
                              "median (110.0 vs 1000.0 MB/s) — check its link speed (NIC, "
                              "cable, switch port)")


def test_three_nodes_with_one_slow_still_name_that_one() -> None:
    out = verdicts([], mesh(NODES[:3], bw={"n02": 5.0}), Limits())
    assert {v.subject for v in out} == {"n02"}


def test_latency_outlier() -> None:
    out = verdicts([], mesh(NODES, lat={"n01": 40.0}), Limits())
    assert [(v.subject, v.metric) for v in out] == [("n01", "latency_us")]
    assert "20.0x the median" in out[0].message


def test_one_bad_link_between_healthy_nodes_is_a_link_verdict() -> None:
    links = [lk if {lk.a, lk.b} != {"n01", "n04"} else LinkResult("n01", "n04", 2.0, 100.0)
             for lk in mesh(NODES)]
    out = verdicts([], links, Limits())
    assert [(v.subject, v.kind) for v in out] == [("n01~n04", "link")]
    assert "switch port" in out[0].message


def test_absolute_limits_apply_when_everyone_is_equally_slow() -> None:
    links = mesh(NODES, bw=dict.fromkeys(NODES, 50.0))
    assert verdicts([], links, Limits()) == []
    out = verdicts([], links, Limits(min_bandwidth_mb_s=100, max_latency_us=1.0))
    assert {(v.subject, v.metric) for v in out} == {(n, m) for n in NODES
                                                    for m in ("bandwidth_mb_s", "latency_us")}
    assert "under the configured 100 MB/s" in out[0].message


def test_two_nodes_give_no_relative_network_verdict() -> None:
    assert verdicts([], [LinkResult("a", "b", 2.0, 1.0)], Limits()) == []


def test_failed_pair_is_an_error() -> None:
    out = verdicts([], [LinkResult("a", "b", error="exit status 1")], Limits())
    assert [(v.subject, v.kind) for v in out] == [("a~b", "error")]


def node(name: str, hpl: float = 100.0, stream: float = 20.0, peak: float | None = 200.0,
         seq: float = 500.0, iops: float = 10000.0) -> NodeResult:
    return NodeResult(name, hpl, stream, peak, {"local_seq_mb_s": seq, "local_rand_iops": iops})


def test_slow_cpu_convicted_with_the_measurement() -> None:
    out = verdicts([node("n01"), node("n02", hpl=40.0), node("n03"), node("n04")], [],
                   Limits())
    assert [(v.subject, v.kind) for v in out] == [("n02", "compute")]
    assert out[0].message == ("n02: HPL 40% of the median node (40 vs 100 Gflops) — check "
                              "CPU frequency/throttling (power-saving mode, BIOS, cooling)")


def test_efficiency_against_the_peak_only_when_configured() -> None:
    nodes = [node(n) for n in NODES]  # 100 of 200 Gflops: 50%
    assert verdicts(nodes, [], Limits()) == []
    out = verdicts(nodes, [], Limits(min_hpl_efficiency=0.8))
    assert {v.subject for v in out} == set(NODES)
    assert "HPL efficiency 50% of the theoretical peak" in out[0].message
    no_peak = [node(n, peak=None) for n in NODES]
    assert verdicts(no_peak, [], Limits(min_hpl_efficiency=0.8)) == []


def test_memory_and_storage_outliers() -> None:
    nodes = [node("n01", stream=5.0), node("n02"), node("n03", iops=100.0), node("n04")]
    out = verdicts(nodes, [], Limits())
    assert [(v.subject, v.kind, v.metric) for v in out] == [
        ("n01", "memory", "stream_gb_s"), ("n03", "storage", "local_rand_iops")]
    out = verdicts([node(n) for n in NODES], [], Limits(min_seq_mb_s=1000))
    assert {v.subject for v in out} == set(NODES) and "fio sequential" in out[0].message


def test_job_errors_are_verdicts() -> None:
    out = verdicts([NodeResult("n01", errors=("check job ended NODE_FAIL",))], [], Limits())
    assert [(v.subject, v.kind, v.message) for v in out] == [
        ("n01", "error", "n01: check job ended NODE_FAIL")]


def test_pairs_all_then_a_sample_covering_every_node() -> None:
    names = [f"n{i:02d}" for i in range(1, 5)]
    assert len(pairs_to_measure(names, 64)) == 6
    big = [f"n{i:03d}" for i in range(100)]
    sample = pairs_to_measure(big, 300)
    assert len(sample) <= 300 and len(set(sample)) == len(sample)
    counts = {n: 0 for n in big}
    for a, b in sample:
        assert a != b
        counts[a] += 1
        counts[b] += 1
    assert min(counts.values()) >= 4  # every node in several pairs (ring and chords)
