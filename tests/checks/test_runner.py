"""The node job's GPU probe with a fake nvidia-smi, and the all-nodes job's script."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from corral.checks.runner import (
    GPU_PROBE,
    RunPlan,
    all_nodes_script,
    collect_all,
    collect_node,
    node_dir,
    node_script,
    wants_all,
)
from corral.checks.verdict import NodeResult

FAKE_SMI = """#!/bin/sh
case "$*" in
  *--query-gpu=index,name,memory.total,clocks.max.sm,pcie.link.width.current,pcie.link.width.max*)
    echo "0, NVIDIA A100-SXM4-40GB, 40960, 1410, 16, 16"
    echo "1, NVIDIA A100-SXM4-40GB, 40960, [N/A], 8, 16" ;;
  *) echo "unexpected arguments: $*" >&2; exit 9 ;;
esac
"""


def plan(tmp: Path, checks: tuple[str, ...], quick: bool = True,
         nodes: tuple[str, ...] = ("n1",)) -> RunPlan:
    return RunPlan("r1", tmp / "run", nodes, (), checks, quick, {})


def run_probe(p: RunPlan, path: str) -> NodeResult:
    d = node_dir(p, "n1")
    d.mkdir(parents=True)
    subprocess.run(["/bin/sh", "-c", GPU_PROBE], cwd=d, check=True, timeout=30,
                   env={"PATH": path})
    return collect_node(p, "n1", "COMPLETED")


def test_gpus_listed_by_a_fake_nvidia_smi(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_SMI)
    os.chmod(bin_dir / "nvidia-smi", 0o755)
    p = plan(tmp_path, ("gpu",))
    assert GPU_PROBE in node_script(p, "n1", 1)
    res = run_probe(p, f"{bin_dir}:/usr/bin:/bin")
    assert res.gpus == ("NVIDIA A100-SXM4-40GB",) * 2 and not res.errors
    assert res.gpu_pcie == ((16.0, 16.0), (8.0, 16.0))
    from corral.checks.verdict import Limits, verdicts

    out = verdicts([res], [], Limits(), None, {"n1": (2, {"a100": 2})})
    assert [v.message for v in out] == [
        "n1: GPU 1 PCIe link x8 of its x16 — reseat the card, check the slot and riser"]


def test_no_nvidia_smi_is_no_gpus_and_a_failing_one_an_error(tmp_path: Path) -> None:
    p = plan(tmp_path / "a", ("gpu",))
    assert run_probe(p, "/nonexistent:/usr/bin:/bin").gpus in ((), None)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\n"
                                        "exit 6\n")
    os.chmod(bin_dir / "nvidia-smi", 0o755)
    res = run_probe(plan(tmp_path / "b", ("gpu",)), f"{bin_dir}:/usr/bin:/bin")
    assert res.gpus is None and res.errors and "exit status 6" in res.errors[0], res


def test_all_nodes_script_and_when_it_runs(tmp_path: Path) -> None:
    three = ("n1", "n2", "n3")
    quick = plan(tmp_path, ("network", "compute", "storage"), True, three)
    full = plan(tmp_path, ("compute", "storage"), False, three)
    assert wants_all(quick) and wants_all(full)
    assert not wants_all(plan(tmp_path, ("compute",), True, three))  # nothing to do
    assert not wants_all(plan(tmp_path, ("storage",), True, ("n1",)))
    q = all_nodes_script(quick, 2)
    assert "hpcc" not in q and "srun -N3 --ntasks-per-node=1 sh -c" in q
    assert "--size=16M" in q and "ready-$SLURMD_NODENAME" in q
    f = all_nodes_script(full, 2)
    assert "-np 6 hpcc" in f and "6928          Ns" in f  # 4000 x sqrt(3)
    res = collect_all(full, "TIMEOUT", [])
    assert res.errors[0] == "all-nodes job ended TIMEOUT" and res.hpl_gflops is None
    assert any("no output" in e for e in res.errors)
