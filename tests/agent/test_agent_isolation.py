"""Isolation with real cgroups (where writable) and the rlimit/watchdog fallback."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from corral.agent.cgroups import CgroupLayout, JobCgroup, cpulist, detect_layout, parse_cpulist
from corral.agent.isolation import node_layout
from corral.agent.runner import JobRunner

from .conftest import CGROUP_ROOT, make_request, wait_exits

FIXTURES = Path("/work/shared/fixtures/hardware/h200-node")

HOG = (f"#!{sys.executable}\n"
       "import time\n"
       "chunks = []\n"
       "for i in range(64):\n"
       "    chunks.append(b'\\x01' * (16 << 20))\n"
       "    print('allocated_mib=%d' % ((i + 1) * 16), flush=True)\n"
       "    time.sleep(0.1)\n"
       "print('NOT KILLED', flush=True)\n")


def cgroups_writable() -> CgroupLayout:
    layout = node_layout(CGROUP_ROOT)
    if layout.mode == "none":
        pytest.skip(f"no writable cgroup on this machine: {layout.reason}")
    return layout


def test_cgroup_memory_limit_is_out_of_memory(runner: JobRunner, tmp_path: Path) -> None:
    layout = cgroups_writable()
    runner.launch(make_request(41, tmp_path, HOG, mem_mb=64, max_pids=32))
    ex = wait_exits(runner, timeout_s=30)[41]
    text = (tmp_path / "slurm-41.out").read_text()
    assert ex.state == "OUT_OF_MEMORY", (ex, text[-300:])
    assert "NOT KILLED" not in text
    assert "oom_kill event" in text  # Slurm's "Detected 1 oom_kill event in StepId=41.batch"
    assert ex.signal == 9 or ex.exit_code == 137
    assert 40 <= ex.max_rss_mb <= 70  # the cgroup's peak: capped at the 64 MB limit
    assert ex.cpu_time_s > 0
    # the job cgroup is gone afterwards
    base = layout.v2_root if layout.mode == "v2" else layout.v1["memory"]
    assert base is not None
    assert os.path.isdir(os.path.join(base, CGROUP_ROOT, "testnode"))
    assert not os.path.exists(os.path.join(base, CGROUP_ROOT, "testnode", "job_41"))


def test_cgroup_placement_cpuset_and_pids(runner: JobRunner, tmp_path: Path) -> None:
    layout = cgroups_writable()
    cpu = max(os.sched_getaffinity(0))
    script = ("#!/bin/sh\ncat /proc/self/cgroup\n"
              "grep Cpus_allowed_list /proc/self/status\n"
              "taskset -p -c 0-63 $$ >/dev/null 2>&1\n"  # widening is refused by the cpuset
              "grep Cpus_allowed_list /proc/self/status\n")
    runner.launch(make_request(42, tmp_path, script, cpus=(cpu,), mem_mb=256, max_pids=50))
    ex = wait_exits(runner)[42]
    assert ex.state == "COMPLETED"
    text = (tmp_path / "slurm-42.out").read_text()
    if layout.mode == "v1":
        # freezer and cpuacct only where the tracking cgroup2 cannot freeze and count CPU
        wanted = ["memory", "cpuset", "pids"]
        if layout.tracking_full:
            wanted_not = ["freezer", "cpuacct"]
            assert f"0::/{CGROUP_ROOT}/testnode/job_42" in text, text
        else:
            wanted, wanted_not = wanted + ["freezer", "cpuacct"], []
        for ctl in wanted:
            assert f":{ctl}:/{CGROUP_ROOT}/testnode/job_42" in text, text
        for ctl in wanted_not:
            assert f":{ctl}:/{CGROUP_ROOT}/testnode/job_42" not in text, text
    else:
        assert f"0::/{CGROUP_ROOT}/testnode/job_42" in text
    allowed = [ln.split()[1] for ln in text.splitlines() if ln.startswith("Cpus_allowed_list")]
    assert allowed == [str(cpu), str(cpu)]


def test_pids_limit_bites(runner: JobRunner, tmp_path: Path) -> None:
    cgroups_writable()
    script = (f"#!{sys.executable}\nimport subprocess\nps, errs = [], 0\n"
              "for i in range(10):\n"
              "    try:\n        ps.append(subprocess.Popen(['sleep', '5']))\n"
              "    except OSError:\n        errs += 1\n"
              "for p in ps:\n    p.kill()\n    p.wait()\n"
              "print('started=%d refused=%d' % (len(ps), errs))\n")
    runner.launch(make_request(43, tmp_path, script, max_pids=5))
    wait_exits(runner)
    text = (tmp_path / "slurm-43.out").read_text()
    assert "started=4 refused=6" in text, text  # python itself + 4 children


def test_fallback_memory_watchdog_is_out_of_memory(bare_runner: JobRunner, tmp_path: Path) -> None:
    bare_runner.launch(make_request(44, tmp_path, HOG, mem_mb=64))
    ex = wait_exits(bare_runner, timeout_s=30)[44]
    text = (tmp_path / "slurm-44.out").read_text()
    assert ex.state == "OUT_OF_MEMORY", (ex, text[-300:])
    assert "exceeded memory limit" in text and "NOT KILLED" not in text
    assert ex.max_rss_mb >= 64


def test_fallback_rlimit_data_backstop(bare_runner: JobRunner, tmp_path: Path) -> None:
    script = ("#!/bin/sh\ngrep -i 'max data size' /proc/self/limits\n")
    bare_runner.launch(make_request(45, tmp_path, script, mem_mb=100))
    wait_exits(bare_runner)
    words = (tmp_path / "slurm-45.out").read_text().split()
    assert words[3:5] == [str(200 << 20), str(200 << 20)]


def test_detect_layouts_from_mount_tables() -> None:
    here = ("tmpfs /sys/fs/cgroup tmpfs rw 0 0\n"
            "cgroup /sys/fs/cgroup/cpuset cgroup rw,relatime,cpuset 0 0\n"
            "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n"
            "cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0\n"
            "cgroup2 /nonexistent/unified cgroup2 rw,relatime 0 0\n")
    layout = detect_layout(here)
    assert layout.mode == "v1"
    assert layout.v1 == {"cpuset": "/sys/fs/cgroup/cpuset", "memory": "/sys/fs/cgroup/memory",
                         "cpuacct": "/sys/fs/cgroup/cpuacct"}
    assert layout.tracking == "/nonexistent/unified"
    assert detect_layout("proc /proc proc rw 0 0\n").mode == "none"
    # the GPU node's mount line (cgroup2 at /sys/fs/cgroup): v2 when it offers memory
    gpu_line = next(ln for ln in (FIXTURES / "cgroup.txt").read_text().splitlines()
                    if ln.startswith("cgroup2 on"))
    assert "nsdelegate" in gpu_line
    controllers = (FIXTURES / "cgroup.txt").read_text().splitlines()[3]
    assert "memory" in controllers.split()


def test_cpulist_round_trip() -> None:
    assert cpulist((5, 0, 1, 2, 7, 8)) == "0-2,5,7-8"
    assert parse_cpulist("0-2,5,7-8\n") == [0, 1, 2, 5, 7, 8]
    assert parse_cpulist("") == []


def test_job_cgroup_lifecycle_direct(tmp_path: Path) -> None:
    layout = cgroups_writable()
    cg = JobCgroup.create(layout, f"{CGROUP_ROOT}/job_direct", mem_mb=32)
    try:
        assert cg.procs() == set()
        u = cg.usage()
        assert u.oom_kills == 0
    finally:
        cg.remove()
    assert all(not os.path.exists(d) for d in cg.dirs.values())
