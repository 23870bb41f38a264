"""GPU discovery through NVML (nvidia-ml-py's ``pynvml``), and nothing when NVML is absent.

For each device, in NVML index order (PCI bus order, the numbering ``nvidia-smi`` and
``CUDA_VISIBLE_DEVICES`` use when ``CUDA_DEVICE_ORDER=PCI_BUS_ID``): the type slug from
the product name (``NVIDIA H200`` -> ``h200``, ``NVIDIA A100-SXM4-80GB`` -> ``a100``,
``NVIDIA GeForce RTX 4090`` -> ``rtx4090``), total memory in MiB, UUID, and the NUMA
domain next to it. The NUMA domain comes from the device's CPU affinity mask
(``nvmlDeviceGetCpuAffinity``) matched against the node's NUMA domains; where the mask
touches several domains, from ``/sys/bus/pci/devices/<bus id>/numa_node``. (NVML's
``nvmlDeviceGetNumaNodeId`` is not used: on coherent platforms such as Grace Hopper it
names the GPU's own memory node, not the CPUs near it.)

``nvml`` can be any object with the pynvml functions used here, so tests pass a fake
built from real captured output. MIG instances are not enumerated (whole GPUs only).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from corral.core.model.node import GpuSpec

_VENDOR_WORDS = {"nvidia", "tesla", "geforce", "quadro", "grid"}


@dataclass(frozen=True)
class GpuInfo:
    """A discovered GPU: the spec plus facts the agent uses but the model does not keep."""

    spec: GpuSpec
    name: str
    pci_bus_id: str
    cpus: tuple[int, ...]  # logical CPUs with affinity to the device (empty if unknown)


def gpu_type_slug(name: str) -> str:
    """A short lowercase type for GRES names: ``NVIDIA H200`` -> ``h200``."""
    words = [w for w in re.split(r"[\s_]+", name.strip()) if w and w.lower() not in _VENDOR_WORDS]
    if not words:
        return "gpu"
    first = words[0].lower()
    if first == "rtx" and len(words) > 1:
        nxt = words[1].lower().split("-")[0]
        first = "rtx" + nxt if nxt[:1].isdigit() else nxt
    slug = re.split(r"[-/]", first)[0]
    slug = re.sub(r"[^a-z0-9]", "", slug)
    return slug or "gpu"


def mask_to_cpus(words: list[int] | tuple[int, ...], word_bits: int = 64) -> tuple[int, ...]:
    """NVML affinity words (lowest CPUs in the first word) -> CPU ids."""
    out: list[int] = []
    for i, word in enumerate(words):
        w = int(word)
        bit = 0
        while w:
            if w & 1:
                out.append(i * word_bits + bit)
            w >>= 1
            bit += 1
    return tuple(out)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _sysfs_numa(sys_root: str, bus_id: str) -> int | None:
    if not bus_id:
        return None
    # NVML: "00000000:00:06.0" (8-digit domain); sysfs: "0000:00:06.0"
    dom, _, rest = bus_id.lower().partition(":")
    for cand in (f"{dom[-4:]}:{rest}", bus_id.lower()):
        try:
            with open(os.path.join(sys_root, "bus/pci/devices", cand, "numa_node")) as f:
                node = int(f.read().strip())
            return node if node >= 0 else None
        except (OSError, ValueError):
            continue
    return None


def numa_for(cpus: tuple[int, ...], numa_cpus: dict[int, set[int]],
             fallback: int | None) -> int | None:
    """The NUMA domain of a device with affinity to ``cpus``."""
    if not numa_cpus:
        return fallback
    if len(numa_cpus) == 1:
        return next(iter(numa_cpus))
    touched = [n for n, c in sorted(numa_cpus.items()) if c & set(cpus)]
    if len(touched) == 1:
        return touched[0]
    return fallback


def discover_gpus(nvml: Any | None = None, numa_cpus: dict[int, set[int]] | None = None,
                  sys_root: str = "/sys") -> list[GpuInfo]:
    """GPUs visible through NVML; [] when NVML (or the driver) is not there."""
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            return []
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ... : no GPUs here
        return []
    numa_cpus = numa_cpus or {}
    ncpu_words = max(1, (max((max(c) for c in numa_cpus.values() if c), default=0) + 64) // 64)
    out: list[GpuInfo] = []
    try:
        for index in range(int(nvml.nvmlDeviceGetCount())):
            h = nvml.nvmlDeviceGetHandleByIndex(index)
            name = _text(nvml.nvmlDeviceGetName(h))
            uuid = _text(nvml.nvmlDeviceGetUUID(h))
            mem_mb = int(nvml.nvmlDeviceGetMemoryInfo(h).total) // (1024 * 1024)
            try:
                bus_id = _text(nvml.nvmlDeviceGetPciInfo(h).busId)
            except Exception:
                bus_id = ""
            try:
                cpus = mask_to_cpus(list(nvml.nvmlDeviceGetCpuAffinity(h, ncpu_words)))
            except Exception:
                cpus = ()
            numa = numa_for(cpus, numa_cpus, _sysfs_numa(sys_root, bus_id))
            try:  # the driver's device file: /dev/nvidia<minor> (not always the index)
                device = f"/dev/nvidia{int(nvml.nvmlDeviceGetMinorNumber(h))}"
            except Exception:
                device = ""
            spec = GpuSpec(index=index, type=gpu_type_slug(name), mem_mb=mem_mb, numa=numa,
                           uuid=uuid, device=device)
            out.append(GpuInfo(spec, name, bus_id, cpus))
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
    return out
