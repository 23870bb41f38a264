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


def test_pairs_cover_every_leaf_switch_inside_and_across() -> None:
    # 4 leaves of 10 nodes in name order: each has a pair inside and one across
    big = [f"n{i:02d}" for i in range(40)]
    leaf_of = {n: "abcd"[int(n[1:]) // 10] for n in big}
    sample = pairs_to_measure(big, 40, leaf_of)
    for leaf in "abcd":
        inner = [p for p in sample if leaf_of[p[0]] == leaf == leaf_of[p[1]]]
        across = [p for p in sample if (leaf_of[p[0]] == leaf) != (leaf_of[p[1]] == leaf)]
        assert inner and across, (leaf, sample)
    assert {n for p in sample for n in p} == set(big)
    # a topology where the plain ring misses switches: every 4th node on leaf "z"
    leaf_of2 = {n: ("z" if int(n[1:]) % 4 == 0 else "y") for n in big}
    plain = pairs_to_measure(big, 40)
    assert not [p for p in plain if leaf_of2[p[0]] == "z" == leaf_of2[p[1]]]  # ring: none
    covered = pairs_to_measure(big, 40, leaf_of2)
    assert [p for p in covered if leaf_of2[p[0]] == "z" == leaf_of2[p[1]]]
    assert len(covered) <= len(plain) + 2 * 2  # at most two pairs added per leaf
    assert pairs_to_measure(big[:4], 64, leaf_of) == pairs_to_measure(big[:4], 64)


def test_leaf_switches_from_the_configuration_json() -> None:
    from corral.checks.verdict import leaf_switches

    cfg = {"switches": [{"name": "s1", "nodes": "n[01-03]", "switches": ""},
                        {"name": "top", "nodes": "", "switches": "s1,s2"}],
           "nodes": [{"name": "n03", "switch": "s2"}, {"name": "n04", "switch": None}]}
    assert leaf_switches(cfg) == {"n01": "s1", "n02": "s1", "n03": "s2"}


def test_all_nodes_scaling_and_shared_filesystem_verdicts() -> None:
    from corral.checks.verdict import AllNodesResult

    def nd(name: str, shared: float) -> NodeResult:
        return NodeResult(name, 10.0, None, 20.0, {"shared_seq_mb_s": shared})

    nodes = [nd("n01", 100.0), nd("n02", 100.0), nd("n03", 100.0), nd("n04", 100.0)]
    ok = AllNodesResult(4, 4, 30.0, 80.0, {n.name: 40.0 for n in nodes})
    assert verdicts(nodes, [], Limits(), ok) == []
    slow = AllNodesResult(4, 4, 12.0, 80.0, {"n01": 40.0, "n02": 40.0, "n03": 5.0,
                                             "n04": 40.0})
    out = verdicts(nodes, [], Limits(min_hpl_efficiency=0.2), slow)
    assert [(v.subject, v.kind, v.metric) for v in out] == [
        ("all-nodes", "scaling", "hpl_gflops"), ("all-nodes", "scaling", "hpl_efficiency"),
        ("n03", "storage", "many_seq_mb_s")]
    assert out[0].message.startswith("all-nodes: HPL on the 4 nodes together 12 Gflops, "
                                     "30% of 4 x the median node (40 Gflops)")
    assert "5 MB/s, 5% of its own alone while the median node kept 40%" in out[2].message
    jammed = AllNodesResult(4, 0, None, None, {n.name: 5.0 for n in nodes})
    out = verdicts(nodes, [], Limits(), jammed)
    assert [(v.subject, v.metric) for v in out] == [("all-nodes", "aggregate_seq_mb_s")]
    assert "took 20 MB/s from 4 nodes writing at once, 20% of what the median node" \
        in out[0].message
    failed = AllNodesResult(4, errors=("all-nodes job ended TIMEOUT",))
    assert [v.kind for v in verdicts(nodes, [], Limits(), failed)] == ["error"]


def test_gpu_count_and_type_against_the_configuration() -> None:
    a100 = "NVIDIA A100-SXM4-40GB"
    nodes = [NodeResult("g1", gpus=(a100, a100)), NodeResult("g2", gpus=(a100,)),
             NodeResult("g3", gpus=("Tesla V100-PCIE-16GB", "Tesla V100-PCIE-16GB")),
             NodeResult("c1", gpus=()), NodeResult("c2")]
    want = {"g1": (2, {"a100": 2}), "g2": (2, {"a100": 2}), "g3": (2, {"a100": 2}),
            "c1": (0, {}), "c2": (1, {"gpu": 1})}
    out = verdicts(nodes, [], Limits(), None, want)
    assert [(v.subject, v.metric) for v in out] == [("g2", "gpu_count"), ("g3", "gpu_type")]
    assert out[0].message.startswith("g2: nvidia-smi lists 1 GPU(s), the configuration has 2")
    assert "0 of the 2 configured 'a100' GPU(s) found" in out[1].message
