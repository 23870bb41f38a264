"""seff-like efficiency and the SWF export of history (read back by the simulator)."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.ops.efficiency import efficiency, hms, seff_lines
from corral.ops.jobs import acct_jobs
from corral.ops.swf_export import history_trace, write_history_swf
from corral.sim.swf import read_swf
from tests.ops.records import record


def test_cpu_and_memory_efficiency_as_seff_defines_them() -> None:
    rec = record(12, start=100.0, end=200.0, cpus=4, cpu_time_s=200.0, mem_per_node_mb=1000,
                 max_rss_mb=250.0)
    e = efficiency(rec, now=300.0)
    assert e.elapsed_s == 100.0 and e.core_walltime_s == 400.0
    assert e.cpu_efficiency == pytest.approx(0.5)
    assert e.mem_efficiency == pytest.approx(0.25)
    lines = seff_lines(e, cluster="c1")
    assert "CPU Efficiency: 50.00% of 00:06:40 core-walltime" in lines
    assert "Memory Efficiency: 25.00% of 1000.00 MB" in lines
    assert "State: COMPLETED (exit code 0)" in lines


def test_memory_per_cpu_and_unknowns() -> None:
    e = efficiency(record(1, start=0, end=10, cpus=2, mem_per_cpu_mb=512, max_rss_mb=512,
                          cpu_time_s=20), now=10)
    assert e.req_mem_mb == 1024 and e.mem_efficiency == pytest.approx(0.5)
    assert e.cpu_efficiency == pytest.approx(1.0)
    never = efficiency(record(2, state="CANCELLED", start=None, end=5), now=10)
    assert never.cpu_efficiency is None and never.mem_efficiency is None
    assert any("did not run" in s for s in seff_lines(never))
    running = efficiency(record(3, state="RUNNING", start=0, end=None, cpus=2), now=30)
    assert running.cpu_efficiency is None and running.core_walltime_s == 60
    assert any("not known until the job ends" in s for s in seff_lines(running))


def test_hms() -> None:
    assert hms(0) == "00:00:00" and hms(3661) == "01:01:01" and hms(90061) == "1-01:01:01"


def test_history_exports_as_swf_the_simulator_reads(tmp_path: Path) -> None:
    recs = [
        record(10, user="alice", account="physics", submit=1000.0, start=1010.0, end=1070.0,
               cpus=4, cpu_time_s=120.0, max_rss_mb=100.0, mem_per_cpu_mb=256),
        record(11, user="bob", account="chem", state="CANCELLED", submit=1005.0, start=None,
               end=1020.0, cpus=2, time_limit_s=None),
        record(12, user="alice", account="chem", state="TIMEOUT", submit=1030.0,
               start=1030.0, end=1090.0, cpus=1, partition="gpu", name="train"),
        record(13, state="RUNNING", submit=1040.0, start=1040.0, end=None),  # not exported
    ]
    out = tmp_path / "hist.swf"
    n = write_history_swf(out, acct_jobs(recs), cluster="c1", total_nodes=2, total_cpus=16)
    assert n == 3
    tr = read_swf(out)
    assert tr.header.unix_start_time == 1000 and tr.max_procs == 16 and tr.max_nodes == 2
    assert tr.column("job_id").tolist() == [10, 11, 12]
    assert tr.column("submit_s").tolist() == [0, 5, 30]
    assert tr.column("wait_s").tolist() == [10, -1, 0]
    assert tr.column("run_s").tolist() == [60, -1, 60]
    assert tr.column("procs_alloc").tolist() == [4, -1, 1]
    assert tr.column("cpu_avg_s").tolist() == [30, -1, -1]
    assert tr.column("mem_used_kb").tolist() == [25600, -1, -1]
    assert tr.column("mem_req_kb").tolist() == [262144, -1, -1]
    assert tr.column("time_req_s").tolist() == [3600, -1, 3600]
    assert tr.column("status").tolist() == [1, 5, 0]
    assert tr.column("user_id").tolist() == [1, 2, 1]
    assert tr.column("group_id").tolist() == [1, 2, 2]
    assert tr.column("partition_id").tolist() == [1, 1, 2]
    assert tr.header.multi["Partition"] == ("1 batch", "2 gpu")
    # no user names in the file
    assert "alice" not in out.read_text()


def test_empty_history_gives_a_valid_empty_trace() -> None:
    tr = history_trace([], cluster="c", now=5000.0)
    assert len(tr) == 0 and tr.header.unix_start_time == 5000
