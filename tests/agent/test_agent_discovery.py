"""Discovery against fake /sys trees built from real captured files, and on this machine."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from corral.agent.cgroups import parse_cpulist
from corral.agent.discovery import discover_node
from corral.agent.gpu import discover_gpus, gpu_type_slug, mask_to_cpus

H200 = Path("/work/shared/fixtures/hardware/h200-node")


def fixture_body(name: str) -> str:
    """A captured file without its "$ command" first line and "# exit=N" last line."""
    lines = (H200 / name).read_text().splitlines()
    assert lines[0].startswith("$ ")
    body = lines[1:]
    if body and body[-1].startswith("# exit="):
        body = body[:-1]
    return "\n".join(body) + "\n"


def put(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def h200_root(tmp_path: Path) -> Path:
    """A fake / with the /sys and /proc files the H200 node showed."""
    root = tmp_path / "h200"
    cpus = []
    for line in fixture_body("cpu-topology.txt").splitlines():
        m = re.match(r"cpu(\d+) pkg=(\d+) core=(\d+) siblings=(\S+)", line)
        assert m, line
        cpu, pkg, core, sib = m.groups()
        cpus.append(int(cpu))
        topo = f"sys/devices/system/cpu/cpu{cpu}/topology"
        put(root, f"{topo}/physical_package_id", pkg + "\n")
        put(root, f"{topo}/core_id", core + "\n")
        put(root, f"{topo}/thread_siblings_list", sib + "\n")
    online = re.search(r"On-line CPU\(s\) list:\s+(\S+)", fixture_body("lscpu.txt"))
    assert online
    put(root, "sys/devices/system/cpu/online", online.group(1) + "\n")
    for line in fixture_body("nodes.txt").splitlines():
        path, cpulist = line.split()
        put(root, path.lstrip("/") + "/cpulist", cpulist + "\n")
    size = re.search(r"node 0 size: (\d+) MB", fixture_body("numactl.txt"))
    assert size
    put(root, "sys/devices/system/node/node0/meminfo",
        f"Node 0 MemTotal:       {int(size.group(1)) * 1024} kB\n")
    put(root, "proc/meminfo", fixture_body("meminfo.txt"))
    put(root, "proc/cpuinfo", fixture_body("cpuinfo-head.txt"))
    # ib.txt: /sys/class/infiniband exists and is empty on that node
    (root / "sys/class/infiniband").mkdir(parents=True)
    assert len(cpus) == 16
    return root


@dataclass
class _Mem:
    total: int


@dataclass
class _Pci:
    busId: str  # noqa: N815 - pynvml's field name


class FakeNvml:
    """The pynvml calls discovery makes, answering from captured per-GPU records."""

    def __init__(self, gpus: list[dict[str, Any]]) -> None:
        self.gpus = gpus
        self.calls: list[str] = []

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        self.calls.append("init")

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> dict[str, Any]:  # noqa: N802
        return self.gpus[i]

    def nvmlDeviceGetName(self, h: dict[str, Any]) -> str:  # noqa: N802
        return str(h["name"])

    def nvmlDeviceGetUUID(self, h: dict[str, Any]) -> str:  # noqa: N802
        return str(h["uuid"])

    def nvmlDeviceGetMemoryInfo(self, h: dict[str, Any]) -> _Mem:  # noqa: N802
        return _Mem(int(h["memory_total"]))

    def nvmlDeviceGetPciInfo(self, h: dict[str, Any]) -> _Pci:  # noqa: N802
        return _Pci(str(h["pci"]))

    def nvmlDeviceGetCpuAffinity(self, h: dict[str, Any], n: int) -> list[int]:  # noqa: N802
        words = list(h["numa_cpus"])
        return (words + [0] * n)[:max(n, len(words))]


class NoNvml:
    def nvmlInit(self) -> None:  # noqa: N802
        raise RuntimeError("NVML Shared Library Not Found")


def h200_nvml() -> FakeNvml:
    data = json.loads(fixture_body("pynvml.txt"))
    return FakeNvml(data["gpus"])


def test_h200_node_from_fixtures(tmp_path: Path) -> None:
    root = h200_root(tmp_path)
    nvml = h200_nvml()
    spec = discover_node("gpu01", root=str(root), nvml=nvml, arch="x86_64")
    # lscpu: 1 socket, 16 cores per socket, 1 thread per core, 1 NUMA node
    assert (spec.sockets, spec.cores_per_socket, spec.threads_per_core) == (1, 16, 1)
    assert spec.cpus == int(fixture_body("nproc.txt"))
    assert spec.core_cpus == tuple((c,) for c in range(16))
    assert spec.mem_mb == 131981020 // 1024
    assert [d.id for d in spec.numa] == [0] and spec.numa[0].cores == tuple(range(16))
    assert spec.numa[0].mem_mb == 4443
    assert {"x86_64", "avx2", "avx512", "amx", "gpu"} <= spec.features
    assert "ib" not in spec.features
    # GPUs: cross-check with nvidia-smi -q -x
    xml = ET.parse(H200 / "nvidia-smi-q.xml").getroot()  # raw XML, no "$ command" line
    smi = xml.findall("gpu")
    assert len(spec.gpus) == len(smi) == int(xml.findtext("attached_gpus") or 0)
    for gpu, node in zip(spec.gpus, smi, strict=True):
        assert gpu.type == "h200" == gpu_type_slug(node.findtext("product_name") or "")
        assert gpu.uuid == node.findtext("uuid")
        assert f"{gpu.mem_mb} MiB" == node.findtext("fb_memory_usage/total")
        assert gpu.numa == 0  # nvidia-smi topo -m: NUMA Affinity 0, CPU Affinity 0-15
    assert spec.gpu_types() == {"h200": 1}
    assert spec.capacity.gpus == 1
    assert nvml.calls == ["init", "shutdown"]


def test_two_socket_eight_gpu_node(tmp_path: Path) -> None:
    """Synthetic (not captured): 2 sockets x 4 cores x 2 threads, Linux sibling numbering
    (cpu c and c+8 share a core), 2 NUMA nodes, 8 H200s, 4 next to each socket."""
    root = tmp_path / "big"
    for cpu in range(16):
        core = cpu % 8
        topo = f"sys/devices/system/cpu/cpu{cpu}/topology"
        put(root, f"{topo}/physical_package_id", f"{core // 4}\n")
        put(root, f"{topo}/core_id", f"{core % 4}\n")
    put(root, "sys/devices/system/cpu/online", "0-15\n")
    put(root, "sys/devices/system/node/node0/cpulist", "0-3,8-11\n")
    put(root, "sys/devices/system/node/node1/cpulist", "4-7,12-15\n")
    put(root, "proc/meminfo", "MemTotal:       2097152 kB\n")
    put(root, "proc/cpuinfo", "processor : 0\nflags : fpu avx2\n")
    (root / "sys/class/infiniband/mlx5_0").mkdir(parents=True)
    base = json.loads(fixture_body("pynvml.txt"))["gpus"][0]
    gpus = []
    for i in range(8):
        mask = 0x0F0F if i < 4 else 0xF0F0
        gpus.append(dict(base, index=i, uuid=f"GPU-{i:04d}", numa_cpus=[mask]))
    spec = discover_node("big", root=str(root), nvml=FakeNvml(gpus), arch="x86_64")
    assert (spec.sockets, spec.cores_per_socket, spec.threads_per_core) == (2, 4, 2)
    assert spec.core_cpus[0] == (0, 8) and spec.core_cpus[5] == (5, 13)
    assert [(d.id, d.cores) for d in spec.numa] == [(0, (0, 1, 2, 3)), (1, (4, 5, 6, 7))]
    assert [g.numa for g in spec.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert spec.gpu_types() == {"h200": 8}
    assert {"ib", "avx2", "gpu"} <= spec.features and "avx512" not in spec.features


def test_no_nvml_means_no_gpus(tmp_path: Path) -> None:
    assert discover_gpus(NoNvml()) == []
    spec = discover_node("x", root=str(h200_root(tmp_path)), nvml=NoNvml())
    assert spec.gpus == () and "gpu" not in spec.features


@pytest.mark.parametrize("name,slug", [
    ("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA A100-SXM4-80GB", "a100"),
    ("Tesla V100-SXM2-16GB", "v100"), ("NVIDIA GeForce RTX 4090", "rtx4090"),
    ("NVIDIA RTX A6000", "a6000"), ("NVIDIA L40S", "l40s"), ("NVIDIA", "gpu"),
])
def test_gpu_type_slugs(name: str, slug: str) -> None:
    assert gpu_type_slug(name) == slug


def test_affinity_mask_words() -> None:
    assert mask_to_cpus([65535, 0, 0, 0]) == tuple(range(16))
    assert mask_to_cpus([0, 1]) == (64,)


def test_real_machine() -> None:
    spec = discover_node()
    assert spec.cpus == psutil.cpu_count(logical=True) == os.cpu_count()
    assert spec.cores == psutil.cpu_count(logical=False)
    online = Path("/sys/devices/system/cpu/online").read_text()
    assert sorted(c for cpus in spec.core_cpus for c in cpus) == parse_cpulist(online)
    total_mb = psutil.virtual_memory().total // (1024 * 1024)
    assert abs(spec.mem_mb - total_mb) <= 1
    assert spec.arch in spec.features
    assert spec.numa and all(d.cores for d in spec.numa)
    # GPUs only where NVML answers; here that decides whether we expect any
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except Exception:
        count = 0
    assert len(spec.gpus) == count
