"""The agent's collector: a real job process tree in a spool, /proc, and NVML (a fake built
from the H200 node's captured facts, since this machine has no GPU)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from corral.agent import spool
from corral.agent.launch import LaunchRequest
from corral.agent.proctree import start_ticks
from corral.ops.agent_metrics import (
    AgentCollector,
    NvmlSampler,
    alloc_cpus,
    cpus_per_node,
    parse_listen,
    serve,
)

# holds ~64 MB and burns CPU until killed
BURN = ("b = bytearray(64 * 1024 * 1024)\n"
        "for i in range(0, len(b), 4096): b[i] = 1\n"
        "while True: pass\n")
SUPERVISOR = ("import subprocess, sys\n"
              f"p = subprocess.Popen([sys.executable, '-c', {BURN!r}])\n"
              "print(p.pid, flush=True)\n"
              "p.wait()\n")


class FakeNvml:
    """pynvml's functions over the captured H200 facts, with one process on GPU 0."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"NVIDIA H200"

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=37, memory=5)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(total=150754820096, used=2 * 1024**3, free=0)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 123456  # mW

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 34

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [SimpleNamespace(pid=self.pid, usedGpuMemory=1024**3),
                SimpleNamespace(pid=1, usedGpuMemory=5)]


class NoNvml:
    def nvmlInit(self) -> None:
        raise RuntimeError("NVML Shared Library Not Found")


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture
def running_job(tmp_path: Path) -> Any:
    jdir = spool.job_dir(tmp_path, 77)
    jdir.mkdir(parents=True)
    req = LaunchRequest(job_id=77, name="burn", user="alice", uid=os.getuid(), gid=os.getgid(),
                        workdir=str(tmp_path), cpus=(0, 1), cores=(0, 1), mem_mb=512, gpus=(0,))
    spool.write_json(jdir / spool.REQUEST, req.to_json())
    sup = subprocess.Popen([sys.executable, "-c", SUPERVISOR], stdout=subprocess.PIPE,
                           text=True)
    assert sup.stdout is not None
    child = int(sup.stdout.readline())
    spool.write_json(jdir / spool.STATUS, {
        "job_id": 77, "restarts": 0, "state": "running", "supervisor_pid": sup.pid,
        "supervisor_ticks": start_ticks(sup.pid), "job_pid": child,
        "start_time": time.time(), "isolation": {"kind": "none"}})
    yield SimpleNamespace(state_dir=tmp_path, jdir=jdir, sup=sup, child=child)
    for pid in (child, sup.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    sup.wait(timeout=10)


def test_node_gpu_and_per_job_metrics_over_http(running_job: Any) -> None:
    col = AgentCollector("n1", running_job.state_dir,
                         nvml=NvmlSampler(FakeNvml(running_job.child)))
    server, _thread, port = serve("127.0.0.1:0", col)
    try:
        deadline = time.monotonic() + 20
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                m = samples(r.read().decode())
            job = (("job_id", "77"), ("node", "n1"), ("user", "alice"))
            cpu = m[("corral_job_cpu_seconds_total", job)]
            rss = m[("corral_job_memory_rss_bytes", job)]
            if cpu >= 0.3 and rss >= 60 * 1024 * 1024:
                break
            assert time.monotonic() < deadline, f"cpu {cpu}, rss {rss}"
            time.sleep(0.1)
    finally:
        server.shutdown()
    assert m[("corral_agent_jobs_running", (("node", "n1"),))] == 1
    assert m[("corral_job_cpus_allocated", job)] == 2
    assert m[("corral_job_memory_limit_bytes", job)] == 512 * 1024 * 1024
    assert m[("corral_job_gpus_allocated", job)] == 1
    assert m[("corral_job_gpu_utilization_ratio", (("gpu", "0"),) + job)] == pytest.approx(0.37)
    assert m[("corral_job_gpu_memory_used_bytes", job)] == 1024**3
    gpu = (("gpu", "0"), ("node", "n1"), ("type", "h200"))
    assert m[("corral_gpu_utilization_ratio", gpu)] == pytest.approx(0.37)
    assert m[("corral_gpu_memory_total_bytes", gpu)] == 150754820096
    assert m[("corral_gpu_power_watts", gpu)] == pytest.approx(123.456)
    assert m[("corral_gpu_temperature_celsius", gpu)] == 34
    assert m[("corral_node_cpus", (("node", "n1"),))] == os.cpu_count()
    assert m[("corral_node_cpu_seconds_total", (("mode", "idle"), ("node", "n1")))] > 0
    assert m[("corral_node_memory_total_bytes", (("node", "n1"),))] > 0


def test_finished_and_broken_spool_entries_are_skipped(running_job: Any) -> None:
    col = AgentCollector("n1", running_job.state_dir, nvml=NvmlSampler(NoNvml()))
    assert [j.job_id for j in col.jobs()] == [77]
    spool.write_json(running_job.jdir / spool.EXIT, {"job_id": 77, "state": "COMPLETED"})
    assert col.jobs() == []
    os.unlink(running_job.jdir / spool.EXIT)
    # a supervisor that died (pid reused check): not reported as running
    st = json.loads((running_job.jdir / spool.STATUS).read_text())
    st["supervisor_ticks"] = (st["supervisor_ticks"] or 0) + 1
    spool.write_json(running_job.jdir / spool.STATUS, st)
    assert col.jobs() == []
    (running_job.state_dir / "jobs" / "junk").mkdir()
    names = {f.name for f in col.collect()}
    assert "corral_gpu_utilization_ratio" in names  # families exist, empty without NVML


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:9100") == ("127.0.0.1", 9100)
    assert parse_listen(":9100") == ("0.0.0.0", 9100)
    assert parse_listen("9100") == ("0.0.0.0", 9100)
    assert parse_listen("[::1]:9100") == ("::1", 9100)
    with pytest.raises(ValueError, match="host:port"):
        parse_listen("host:http")


def test_allocated_cpus_come_from_the_allocation() -> None:
    assert cpus_per_node("16") == [16] and cpus_per_node("2(x3),1") == [2, 2, 2, 1]
    req = {"env": {"SLURM_JOB_CPUS_PER_NODE": "4(x2),8"}, "node_index": 2, "cpus": []}
    assert alloc_cpus(req) == 8
    assert alloc_cpus({"env": {}, "cpus": [0, 1, 2]}) == 3
    assert alloc_cpus({"env": {"SLURM_JOB_CPUS_PER_NODE": "bad"}, "cores": [5]}) == 1
