"""Isolation with real cgroups (where writable) and the rlimit/watchdog fallback."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from corral.agent.cgroups import CgroupLayout, JobCgroup, cpulist, detect_layout, parse_cpulist
from corral.agent.isolation import node_layout
from corral.agent.runner import JobRunner

from .conftest import CGROUP_ROOT, make_request, wait_exits, wait_for

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
    # the next job of the same supervisor reuses its cgroup, reset: no OOM kill inherited,
    # peak and CPU time its own, a new limit
    small = f"#!{sys.executable}\nb = b'x' * (8 << 20)\nprint('ok', flush=True)\n"
    runner.launch(make_request(46, tmp_path, small, mem_mb=128))
    ex2 = wait_exits(runner)[46]
    assert ex2.state == "COMPLETED", ex2
    assert ex2.max_rss_mb < 40 and 0 < ex2.cpu_time_s < ex.cpu_time_s + 5
    dirs = [(runner.status(j) or {})["isolation"]["cgroup"]["dirs"] for j in (41, 46)]
    assert dirs[0] == dirs[1], dirs
    mem_dir = dirs[0].get("memory") or dirs[0]["v2"]
    limit = "memory.limit_in_bytes" if layout.mode == "v1" else "memory.max"
    assert (Path(mem_dir) / limit).read_text().strip() == str(128 << 20)
    # the cgroup exists only while its supervisor does
    runner.close()
    wait_for(lambda: not any(os.path.exists(d) for d in dirs[0].values()), timeout_s=10,
             what="the supervisor's cgroup removed")


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
    # the job's cgroup is its supervisor's (kept for its next job): sup_<pid>
    sup = (runner.status(42) or {})["supervisor_pid"]
    where = f"/{CGROUP_ROOT}/testnode/sup_{sup}"
    if layout.mode == "v1":
        # freezer and cpuacct only where the tracking cgroup2 cannot freeze and count CPU
        wanted = ["memory", "cpuset", "pids"]
        if layout.tracking_full:
            wanted_not = ["freezer", "cpuacct"]
            assert f"0::{where}" in text, text
        else:
            wanted, wanted_not = wanted + ["freezer", "cpuacct"], []
        for ctl in wanted:
            assert f":{ctl}:{where}" in text, text
        for ctl in wanted_not:
            assert f":{ctl}:{where}" not in text, text
    else:
        assert f"0::{where}" in text
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


def test_reused_cgroup_takes_each_jobs_own_limits(runner: JobRunner, tmp_path: Path) -> None:
    cgroups_writable()
    cpu = max(os.sched_getaffinity(0))
    everyone = cpulist(sorted(os.sched_getaffinity(0)))
    probe = ("#!/bin/sh\ngrep Cpus_allowed_list /proc/self/status\n"
             "for i in 1 2 3 4 5 6; do sleep 0.2 & done; wait; echo forked\n")
    runner.launch(make_request(47, tmp_path, probe, cpus=(cpu,), max_pids=3))
    wait_exits(runner)
    runner.launch(make_request(48, tmp_path, probe))  # unpinned, no pids limit
    wait_exits(runner)
    first = (tmp_path / "slurm-47.out").read_text()
    second = (tmp_path / "slurm-48.out").read_text()
    assert first.split()[1] == str(cpu) and "fork" in first.lower() and "forked" not in first
    assert second.split()[1] == everyone, second  # the pinning did not stick
    assert "forked" in second and "Cannot fork" not in second, second
    d47 = (runner.status(47) or {})["isolation"]["cgroup"]["dirs"]
    d48 = (runner.status(48) or {})["isolation"]["cgroup"]["dirs"]
    assert set(d47.values()) == set(d48.values())  # one supervisor, one cgroup


def test_cgroups_of_vanished_supervisors_are_removed(tmp_path: Path) -> None:
    layout = cgroups_writable()
    from corral.agent.cgslot import remove_stale

    parent = f"{CGROUP_ROOT}/staletest"
    node_layout(parent)
    bases = ([layout.v2_root] if layout.mode == "v2" else list(layout.v1.values())) + \
        ([layout.tracking] if layout.tracking else [])
    made = []
    for base in bases:
        assert base is not None
        for name in ("sup_999999999", f"sup_{os.getpid()}"):  # a dead pid, a live one
            d = os.path.join(base, parent, name)
            os.makedirs(d, exist_ok=True)
            made.append(d)
    try:
        assert remove_stale(layout, parent) == len(bases)
        assert all(os.path.exists(d) == (f"sup_{os.getpid()}" in d) for d in made)
    finally:
        for d in made:
            if os.path.exists(d):
                os.rmdir(d)


def test_slot_reset_rewrites_a_limit_changed_behind_its_back() -> None:
    """The slot keeps its control files open and skips limits it already set; a value
    someone else wrote in between is seen and set again, a new job's limit applied."""
    layout = cgroups_writable()
    from corral.agent.cgslot import SlotCgroup

    slot = SlotCgroup.open(layout, f"{CGROUP_ROOT}/sup_slottest", mem_mb=64, cpus=(),
                           max_pids=0)
    try:
        if "v2" in slot.dirs:
            mem_file = os.path.join(slot.dirs["v2"], "memory.max")
        elif "memory" in slot.dirs:
            mem_file = os.path.join(slot.dirs["memory"], "memory.limit_in_bytes")
        else:
            pytest.skip("no memory controller for job cgroups here")

        def limit() -> int:
            return int(Path(mem_file).read_text())

        assert slot.reset(64, (), 0)
        assert limit() == 64 << 20
        assert slot.reset(64, (), 0)  # the same limits again: nothing to write
        assert limit() == 64 << 20
        if "memory" in slot.dirs and os.path.exists(
                os.path.join(slot.dirs["memory"], "memory.memsw.limit_in_bytes")):
            Path(slot.dirs["memory"], "memory.memsw.limit_in_bytes").write_text("-1")
        Path(mem_file).write_text(str(128 << 20))  # behind the slot's back
        assert slot.reset(64, (), 0)
        assert limit() == 64 << 20
        assert slot.reset(32, (), 0)
        assert limit() == 32 << 20
        assert slot.procs() == set()
        assert slot.usage().oom_kills == 0
    finally:
        slot.discard()
    assert all(not os.path.exists(d) for d in slot.dirs.values())
