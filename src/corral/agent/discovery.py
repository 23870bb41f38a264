"""Node discovery: CPU topology, NUMA, memory, features and GPUs, read from /sys and /proc.

Everything is read below a ``root`` path (default ``/``) so tests can point it at a fake
tree built from real captured files. Nothing is shelled out (no ``lscpu``).

- **CPUs**: online CPUs from ``sys/devices/system/cpu/online``; each CPU's
  ``topology/physical_package_id`` and ``core_id``. A physical core is a distinct
  ``(package, core_id)``; cores are numbered socket-major in ``(package, core_id)``
  order, as ``NodeSpec`` expects, and ``core_cpus[c]`` lists the logical CPUs (hardware
  threads) of core ``c``. ``cores_per_socket`` is the smallest per-socket count (a node
  with uneven sockets is described conservatively) and ``threads_per_core`` the largest
  sibling count.
- **NUMA**: ``sys/devices/system/node/node<N>/{cpulist,meminfo}``; a domain holds the
  cores whose first CPU belongs to it. Without that directory: one domain per socket.
- **Memory**: ``MemTotal`` of ``proc/meminfo`` (MiB).
- **Features**: the architecture (``x86_64``/``aarch64``), ``avx2``, ``avx512`` (avx512f),
  ``amx`` (amx_tile), ``sve``, ``ib`` (devices in ``sys/class/infiniband``), ``gpu``,
  ``vm`` (KVM usable and qemu installed: ``corral.agent.vm.discover``; real root only).
- **GPUs**: ``gpu.discover_gpus`` (NVML), with the NUMA domains found here.
"""

from __future__ import annotations

import os
import platform
import socket
from typing import Any

from corral.agent.cgroups import parse_cpulist
from corral.agent.gpu import GpuInfo, discover_gpus
from corral.agent.vm.discover import vm_capable
from corral.core.model.node import NodeSpec, NumaDomain

FLAG_FEATURES = {"avx2": "avx2", "avx512f": "avx512", "amx_tile": "amx", "sve": "sve"}


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _int(path: str) -> int | None:
    text = _read(path)
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


def cpu_topology(root: str = "/") -> list[tuple[int, int, int]]:
    """(cpu, package, core_id) for every online CPU."""
    base = os.path.join(root, "sys/devices/system/cpu")
    online_text = _read(os.path.join(base, "online"))
    if online_text is not None:
        cpus = parse_cpulist(online_text)
    else:
        cpus = sorted(int(n[3:]) for n in os.listdir(base)
                      if n.startswith("cpu") and n[3:].isdigit())
    out: list[tuple[int, int, int]] = []
    for cpu in cpus:
        topo = os.path.join(base, f"cpu{cpu}", "topology")
        pkg = _int(os.path.join(topo, "physical_package_id"))
        core = _int(os.path.join(topo, "core_id"))
        out.append((cpu, pkg if pkg is not None and pkg >= 0 else 0,
                    core if core is not None else cpu))
    return out


def numa_cpus(root: str = "/") -> dict[int, set[int]]:
    base = os.path.join(root, "sys/devices/system/node")
    out: dict[int, set[int]] = {}
    try:
        names = os.listdir(base)
    except OSError:
        return out
    for name in names:
        if name.startswith("node") and name[4:].isdigit():
            text = _read(os.path.join(base, name, "cpulist")) or ""
            out[int(name[4:])] = set(parse_cpulist(text))
    return out


def _numa_mem_mb(root: str, node: int) -> int:
    text = _read(os.path.join(root, f"sys/devices/system/node/node{node}/meminfo")) or ""
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] == "MemTotal:":
            return int(parts[3]) // 1024
    return 0


def mem_total_mb(root: str = "/") -> int:
    for line in (_read(os.path.join(root, "proc/meminfo")) or "").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 0


def cpu_flags(root: str = "/") -> set[str]:
    for line in (_read(os.path.join(root, "proc/cpuinfo")) or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def has_infiniband(root: str = "/") -> bool:
    try:
        return bool(os.listdir(os.path.join(root, "sys/class/infiniband")))
    except OSError:
        return False


def discover_node(name: str | None = None, root: str = "/", nvml: Any = "auto",
                  arch: str | None = None) -> NodeSpec:
    """Describe this machine (or the fake tree under ``root``) as a ``NodeSpec``.

    ``nvml``: a pynvml-like object; ``"auto"`` (default) uses the real ``pynvml`` when
    ``root`` is "/" and finds no GPUs under a fake root; ``None`` skips GPU discovery.
    """
    topo = cpu_topology(root)
    cores_of: dict[tuple[int, int], list[int]] = {}
    for cpu, pkg, core in topo:
        cores_of.setdefault((pkg, core), []).append(cpu)
    keys = sorted(cores_of)
    core_cpus = tuple(tuple(sorted(cores_of[k])) for k in keys)
    packages = sorted({k[0] for k in keys})
    per_socket = min(sum(1 for k in keys if k[0] == p) for p in packages) if packages else 1
    threads = max((len(c) for c in core_cpus), default=1)
    numa_map = numa_cpus(root)
    domains = [NumaDomain(node, tuple(i for i, cc in enumerate(core_cpus) if cc[0] in cpus),
                          _numa_mem_mb(root, node))
               for node, cpus in sorted(numa_map.items())]
    gpus: list[GpuInfo] = []
    if isinstance(nvml, str) and nvml == "auto":
        if os.path.abspath(root) == "/":
            gpus = discover_gpus(None, numa_map, os.path.join(root, "sys"))
    elif nvml is not None:
        gpus = discover_gpus(nvml, numa_map, os.path.join(root, "sys"))
    machine = arch or platform.machine() or "x86_64"
    features = {machine}
    flags = cpu_flags(root)
    features |= {feat for flag, feat in FLAG_FEATURES.items() if flag in flags}
    if has_infiniband(root):
        features.add("ib")
    if gpus:
        features.add("gpu")
    if os.path.abspath(root) == "/" and vm_capable():  # KVM usable, qemu installed
        features.add("vm")
    return NodeSpec(
        name=name or socket.gethostname().split(".")[0],
        sockets=max(len(packages), 1),
        cores_per_socket=max(per_socket, 1),
        threads_per_core=threads,
        mem_mb=mem_total_mb(root),
        gpus=tuple(g.spec for g in gpus),
        numa=tuple(domains),
        features=frozenset(features),
        arch=machine,
        core_cpus=core_cpus,
    )
