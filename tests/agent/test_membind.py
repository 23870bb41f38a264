"""srun --mem-bind per task: the NUMA nodes chosen (a fake two-node host in sysfs), srun's
refusals, and the policy the kernel then holds for a real process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.agent import membind
from corral.agent.membind import MemBindError, bind_task, check


@pytest.fixture
def two_nodes(tmp_path: Path) -> str:
    """A host of two NUMA nodes: CPUs 0-3 on node 0, 4-7 on node 1."""
    base = tmp_path / "devices/system/node"
    for node, cpus in ((0, "0-3"), (1, "4-7")):
        (base / f"node{node}").mkdir(parents=True)
        (base / f"node{node}" / "cpulist").write_text(cpus + "\n")
    (base / "has_memory").write_text("0-1\n")
    (base / "online").write_text("0-1\n")
    return str(tmp_path)


def test_local_follows_the_tasks_cpus(two_nodes: str) -> None:
    assert bind_task("local", 0, (0, 1), (0, 1), two_nodes).nodes == (0,)
    assert bind_task("local", 1, (4, 5), (0, 1), two_nodes).nodes == (1,)
    assert bind_task("local", 0, (3, 4), (0, 1), two_nodes).nodes == (0, 1)
    assert bind_task("local", 0, (), (0, 1), two_nodes).nodes == ()


def test_maps_masks_and_rank_wrap_over_the_tasks(two_nodes: str) -> None:
    got = [bind_task("map_mem:1,0", i, (0,), (0, 1), two_nodes).nodes for i in range(3)]
    assert got == [(1,), (0,), (1,)]
    got = [bind_task("mask_mem:0x3,0x2", i, (0,), (0, 1), two_nodes).nodes for i in range(3)]
    assert got == [(0, 1), (1,), (0, 1)]
    assert [bind_task("rank", i, (0,), (0, 1), two_nodes).nodes for i in range(3)] == \
        [(0,), (1,), (0,)]
    assert bind_task("map_mem:0x1", 0, (0,), (0, 1), two_nodes).nodes == (1,)  # hex ids


def test_nodes_the_task_may_not_use_are_dropped(two_nodes: str) -> None:
    assert bind_task("map_mem:5", 0, (0,), (0, 1), two_nodes).nodes == ()  # no such node
    assert bind_task("mask_mem:0x3", 0, (0,), (0,), two_nodes).nodes == (0,)  # job's mems
    assert bind_task("local", 0, (4,), (0,), two_nodes).nodes == ()


def test_prefer_keeps_the_first_node_and_the_flags_are_told(two_nodes: str) -> None:
    b = bind_task("verbose,prefer,mask_mem:0x3", 0, (0,), (0, 1), two_nodes)
    assert b.nodes == (0,) and b.prefer and b.verbose and b.mode == membind.MPOL_PREFERRED
    assert b.plan_text() == "p:0"
    assert b.env["SLURM_MEM_BIND_TYPE"] == "mask_mem:"
    assert b.env["SLURM_MEM_BIND_LIST"] == "0x3"
    assert b.env["SLURM_MEM_BIND_VERBOSE"] == "verbose"
    assert b.env["SLURM_MEM_BIND_PREFER"] == "prefer"
    b = bind_task("q,nosort,local", 1, (4,), (0, 1), two_nodes)
    assert (b.nodes, b.prefer, b.verbose, b.plan_text()) == ((1,), False, False, "b:1")
    assert b.env == {"SLURM_MEM_BIND": "quiet,local", "SLURM_MEM_BIND_LIST": "",
                     "SLURM_MEM_BIND_TYPE": "local", "SLURM_MEM_BIND_VERBOSE": "quiet"}
    b = bind_task("v,p,sort,map_mem:1,0", 0, (0,), (0, 1), two_nodes)  # slurmstepd's words
    assert b.env == {"SLURM_MEM_BIND": "verbose,prefer,map_mem:1,0",
                     "SLURM_MEM_BIND_LIST": "1,0", "SLURM_MEM_BIND_TYPE": "map_mem:",
                     "SLURM_MEM_BIND_VERBOSE": "verbose", "SLURM_MEM_BIND_PREFER": "prefer",
                     "SLURM_MEM_BIND_SORT": "sort"}
    assert bind_task("none", 0, (0,), (0, 1), two_nodes).env["SLURM_MEM_BIND"] == "quiet,none"
    for none in ("none", "no", "", "quiet"):
        assert bind_task(none, 0, (0,), (0, 1), two_nodes).nodes == ()


@pytest.mark.parametrize("bad, message", [
    ("bogus", "invalid --mem-bind argument 'bogus'"),
    ("local:0", "only map_mem and mask_mem take a list"),
    ("map_mem:", "--mem-bind=map_mem needs a list"),
    ("map_mem:0,x", "bad NUMA node 'x'"),
    ("map_mem:-1", "bad NUMA node '-1'"),
    ("map_mem:5000", "bad NUMA node '5000'"),
    ("mask_mem:0x0", "bad NUMA node mask '0x0'"),
    ("mask_mem:zz", "bad NUMA node mask 'zz'"),
    ("help", "Memory bind options:"),
])
def test_srun_refuses_what_it_cannot_honour(bad: str, message: str) -> None:
    with pytest.raises(MemBindError, match=message.replace("(", r"\(").replace("-", r"\-")):
        check(bad)


@given(spec=st.sampled_from(["local", "rank", "map_mem:0,1,2,3", "mask_mem:0xf,0x5",
                             "prefer,mask_mem:0x6", "none"]),
       local=st.integers(0, 64), cpus=st.sets(st.integers(0, 7), max_size=8),
       allowed=st.sets(st.integers(0, 3), max_size=4))
def test_a_binding_never_leaves_the_allowed_nodes(spec: str, local: int, cpus: set[int],
                                                  allowed: set[int]) -> None:
    sys_root = os.path.join(os.path.dirname(__file__), "data", "numa4")
    b = bind_task(spec, local, tuple(sorted(cpus)), tuple(sorted(allowed)), sys_root)
    assert set(b.nodes) <= allowed
    assert len(b.nodes) <= (1 if b.prefer else 4)
    assert b.plan_text() == ("" if not b.nodes else
                             ("p:" if b.prefer else "b:") + ",".join(map(str, b.nodes)))


def test_the_kernel_holds_the_policy_after_exec(tmp_path: Path) -> None:
    """A real process: bound to this host's first memory node, its exec'd program's
    mappings show the policy (numa_maps ``bind:N``)."""
    nodes = membind.allowed_nodes()
    assert nodes, "this host shows no memory node"
    b = bind_task(f"map_mem:{nodes[0]}", 0, (), nodes)
    out = tmp_path / "maps"
    pid = os.fork()
    if pid == 0:
        try:
            fd = os.open(out, os.O_WRONLY | os.O_CREAT, 0o600)
            os.dup2(fd, 1)
            membind.apply(b)
            os.execvp("grep", ["grep", "-m1", "-oE", "(bind|prefer):[0-9,-]+",
                               "/proc/self/numa_maps"])
        finally:
            os._exit(99)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert out.read_text().strip() == f"bind:{nodes[0]}"
