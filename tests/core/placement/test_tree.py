"""Switch-tree placement: the lowest upper switch whose subtree holds the job."""

from __future__ import annotations

from dataclasses import replace

from builders import cluster, job

from corral.core import run_cycle
from corral.core.config import Ordering, PlacementMode, SchedulerConfig
from corral.core.placement.tree import subtree_leaves

TOPO = SchedulerConfig(ordering=Ordering.FCFS, placement=PlacementMode.TOPOLOGY)
# sw1..sw4 two nodes each; spineA over sw1+sw2, spineB over sw3+sw4, core over both spines
UP = {"sw1": ("spineA", "core"), "sw2": ("spineA", "core"),
      "sw3": ("spineB", "core"), "sw4": ("spineB", "core")}


def tree_cluster(with_tree: bool = True):  # type: ignore[no-untyped-def]
    c = cluster(nodes=8, switches=4, sockets=1, cores_per_socket=4)
    if with_tree:
        c.nodes = [replace(n, spec=replace(n.spec, uplinks=UP[n.spec.switch or ""]))
                   for n in c.nodes]
    return c


def place(c, need_nodes: int) -> set[str]:  # type: ignore[no-untyped-def]
    busy = [job(1).running_on(("n001", 4)).build()]  # sw1 keeps one idle node
    r = run_cycle(c.snapshot(pending=[job(2).nodes(need_nodes).exclusive().build()],
                             running=busy), TOPO, 0.0)
    assert len(r.starts) == 1, r.pending
    return set(r.starts[0].allocation.node_names)


def test_job_stays_under_one_spine_when_a_spine_holds_it() -> None:
    # no leaf holds 3 nodes; spineA (1 + 2 idle) is the best-fitting spine that does
    assert place(tree_cluster(), 3) == {"n002", "n003", "n004"}
    # the flat rule (largest leaves first) would cross spines: sw2 + sw3
    assert place(tree_cluster(with_tree=False), 3) == {"n003", "n004", "n005"}


def test_job_larger_than_any_spine_goes_under_the_core() -> None:
    got = place(tree_cluster(), 6)
    assert len(got) == 6 and "n001" not in got


def test_subtree_choice_levels_fit_and_required_leaves() -> None:
    up = [("a", "top"), ("a", "top"), ("b", "top"), ("b", "top"), ()]
    names = ["l0", "l1", "l2", "l3", "l4"]
    # level-1 switches beat the root; best fit among them (b holds 4, a holds 5)
    assert subtree_leaves({0: 3, 1: 2, 2: 2, 3: 2}, 4, set(), up, names) == [2, 3]
    # a required leaf under a: b no longer qualifies
    assert subtree_leaves({0: 3, 1: 2, 2: 2, 3: 2}, 4, {1}, up, names) == [1, 0]
    # too big for a spine: the root, largest leaves first
    assert subtree_leaves({0: 3, 1: 2, 2: 2, 3: 2}, 7, set(), up, names) == [0, 1, 2]
    # a leaf outside the tree is required: no subtree holds it, flat fallback
    assert subtree_leaves({0: 3, 4: 5}, 6, {4}, up, names) is None
