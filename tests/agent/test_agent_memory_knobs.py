"""Slurm's memory-constraint knobs (cgroup.conf ConstrainRAMSpace, MinRAMSpace,
AllowedRAMSpace, ConstrainSwapSpace, AllowedSwapSpace) where the agent sets the limit."""

from __future__ import annotations

import sys
from pathlib import Path

from corral.agent.launch import memory_limits_mb
from corral.agent.runner import JobRunner

from .conftest import make_request, wait_exits
from .test_agent_isolation import HOG, cgroups_writable

SMALL = f"#!{sys.executable}\nb = b'x' * (8 << 20)\nprint('ok', flush=True)\n"


def limits(**kw: object) -> tuple[int, int]:
    return memory_limits_mb(make_request(1, "/", None, **kw))


def test_limits_follow_slurms_rules() -> None:
    assert limits() == (0, 0)  # no --mem: no limit
    assert limits(mem_mb=5) == (30, 0)  # MinRAMSpace=30 (Slurm's default) is the floor
    assert limits(mem_mb=1000) == (1000, 0)
    assert limits(mem_mb=1000, allowed_ram_pct=110.0) == (1100, 0)
    assert limits(mem_mb=5, min_ram_mb=0) == (5, 0)
    assert limits(mem_mb=1000, constrain_ram=False) == (0, 0)
    assert limits(mem_mb=1000, constrain_swap=True) == (1000, 1000)  # AllowedSwapSpace=0
    assert limits(mem_mb=1000, constrain_swap=True, allowed_swap_pct=50.0) == (1000, 1500)
    # RAM unconstrained, swap constrained: RAM + swap together (Slurm on cgroup v1)
    assert limits(mem_mb=1000, constrain_ram=False, constrain_swap=True,
                  allowed_swap_pct=20.0) == (1200, 1200)


def test_tiny_mem_request_runs_under_the_floor(runner: JobRunner, tmp_path: Path) -> None:
    layout = cgroups_writable()
    runner.launch(make_request(71, tmp_path, SMALL, mem_mb=5))  # sbatch --mem=5
    ex = wait_exits(runner, timeout_s=30)[71]
    assert ex.state == "COMPLETED", (ex, (tmp_path / "slurm-71.out").read_text()[-300:])
    mem_dir = (runner.status(71) or {})["isolation"]["cgroup"]["dirs"]
    mem_dir = mem_dir.get("memory") or mem_dir["v2"]
    limit = "memory.limit_in_bytes" if layout.mode == "v1" else "memory.max"
    assert (Path(mem_dir) / limit).read_text().strip() == str(30 << 20)
    # a job that goes past its (floored) limit is still killed
    runner.launch(make_request(72, tmp_path, HOG, mem_mb=5))
    ex = wait_exits(runner, timeout_s=30)[72]
    text = (tmp_path / "slurm-72.out").read_text()
    assert ex.state == "OUT_OF_MEMORY", (ex, text[-300:])
    assert "NOT KILLED" not in text and ex.max_rss_mb <= 35, (ex, text[-300:])


def test_swap_limit_only_when_constrained(runner: JobRunner, tmp_path: Path) -> None:
    layout = cgroups_writable()
    runner.launch(make_request(73, tmp_path, SMALL, mem_mb=64, constrain_swap=True,
                               allowed_swap_pct=50.0))
    assert wait_exits(runner)[73].state == "COMPLETED"
    runner.launch(make_request(74, tmp_path, SMALL, mem_mb=64))  # same (reused) cgroup
    assert wait_exits(runner)[74].state == "COMPLETED"
    dirs = (runner.status(74) or {})["isolation"]["cgroup"]["dirs"]
    if layout.mode == "v1":
        memsw = Path(dirs["memory"], "memory.memsw.limit_in_bytes")
        if memsw.exists():
            assert int(memsw.read_text()) > 1 << 60  # lifted again: swap not constrained
    else:
        assert Path(dirs["v2"], "memory.swap.max").read_text().strip() == "max"


def test_ram_unconstrained_means_no_limit(runner: JobRunner, tmp_path: Path) -> None:
    cgroups_writable()
    script = f"#!{sys.executable}\nb = b'x' * (48 << 20)\nprint('ok', flush=True)\n"
    runner.launch(make_request(75, tmp_path, script, mem_mb=8, constrain_ram=False))
    ex = wait_exits(runner, timeout_s=30)[75]
    assert ex.state == "COMPLETED", (ex, (tmp_path / "slurm-75.out").read_text()[-300:])
    assert ex.max_rss_mb > 40


def test_fallback_watchdog_uses_the_floor(bare_runner: JobRunner, tmp_path: Path) -> None:
    bare_runner.launch(make_request(76, tmp_path, SMALL, mem_mb=5))
    ex = wait_exits(bare_runner, timeout_s=30)[76]
    assert ex.state == "COMPLETED", (ex, (tmp_path / "slurm-76.out").read_text()[-300:])
