"""Readers of the check programs' outputs, and the theoretical peak of a CPU.

- ``parse_hpcc``: hpcc's ``hpccoutf.txt`` ends with a ``Begin of Summary section`` of
  ``Key=Value`` lines (``HPL_Tflops``, ``StarSTREAM_Triad`` in GB/s, ``CommWorldProcs``,
  ...); only that section is read, numbers as floats.
- ``parse_pingpong``: our ping-pong program prints ``pingpong latency_us=X
  bandwidth_mb_s=Y bytes=N reps=R`` (see ``pingpong.py``).
- ``parse_fio``: ``fio --output-format=json``: per job name, read/write bandwidth (KiB/s
  in ``bw``) and IOPS; the direction is the one that moved bytes.
- ``peak_gflops``: cores x GHz x double-precision flops per cycle from the CPU flags
  (avx512f+fma: 32, avx2/fma: 16, avx: 8, sse2: 4); None when the frequency is unknown.

- ``parse_gpus``: ``nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,
  pcie.link.width.current,pcie.link.width.max --format=csv,noheader,nounits``: one GPU a
  line (memory MiB, clock MHz, PCIe lanes; ``[N/A]`` read as unknown).

All raise ``ValueError`` with what is missing when the text is not what they read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass


def parse_hpcc(text: str) -> dict[str, float]:
    """The summary section of ``hpccoutf.txt`` as ``{key: number}``."""
    start = text.find("Begin of Summary section.")
    end = text.find("End of Summary section.", start)
    if start < 0 or end < 0:
        raise ValueError("hpcc output has no 'Begin/End of Summary section' (did hpcc finish?)")
    out: dict[str, float] = {}
    for line in text[start:end].splitlines()[1:]:
        key, sep, value = line.partition("=")
        if not sep:
            continue
        try:
            out[key.strip()] = float(value.strip())
        except ValueError:
            continue
    if "HPL_Tflops" not in out:
        raise ValueError("hpcc summary has no HPL_Tflops")
    return out


_PP = re.compile(r"^pingpong\s+(.*)$", re.M)


def parse_pingpong(text: str) -> dict[str, float]:
    """``{"latency_us": ..., "bandwidth_mb_s": ...}`` from the ping-pong program's line."""
    m = _PP.search(text)
    if m is None:
        raise ValueError("no 'pingpong ...' line in the ping-pong output")
    out: dict[str, float] = {}
    for item in m.group(1).split():
        k, _, v = item.partition("=")
        try:
            out[k] = float(v)
        except ValueError:
            continue  # reps=a,b and host names: not numbers
    for need in ("latency_us", "bandwidth_mb_s"):
        if need not in out:
            raise ValueError(f"ping-pong output lacks {need}")
    return out


def parse_fio(text: str) -> dict[str, dict[str, float]]:
    """``{job name: {"bw_mb_s": MB/s, "iops": n}}`` from fio's JSON output."""
    brace = text.find("{")  # fio may print notes before the JSON document
    if brace < 0:
        raise ValueError("fio output has no JSON document")
    try:
        doc = json.loads(text[brace:])
    except json.JSONDecodeError as exc:
        raise ValueError(f"fio output is not JSON: {exc}") from None
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(jobs, list) or not jobs:
        raise ValueError("fio JSON has no jobs")
    out: dict[str, dict[str, float]] = {}
    for job in jobs:
        name = str(job.get("jobname", ""))
        best = max((job.get(d) or {} for d in ("read", "write")),
                   key=lambda s: float(s.get("io_bytes", 0) or 0))
        out[name] = {"bw_mb_s": float(best.get("bw", 0) or 0) * 1024 / 1e6,
                     "iops": float(best.get("iops", 0) or 0)}
    return out


@dataclass(frozen=True)
class CpuProbe:
    cpus: int
    mhz: float | None  # maximum frequency (cpufreq) or the cpuinfo "cpu MHz"
    flags: frozenset[str]
    model: str = ""


def parse_probe(text: str) -> CpuProbe:
    """The probe block the node job prints: ``cpus=N``, ``max_khz=K`` (may be empty),
    then ``/proc/cpuinfo``'s first processor (``model name``, ``cpu MHz``, ``flags``)."""
    vals: dict[str, str] = {}
    for line in text.splitlines():
        for sep in ("=", ":"):
            k, s, v = line.partition(sep)
            if s and k.strip() and k.strip() not in vals:
                vals[k.strip()] = v.strip()
                break
    try:
        cpus = int(vals["cpus"])
    except (KeyError, ValueError):
        raise ValueError("CPU probe lacks cpus=N") from None
    mhz: float | None = None
    if vals.get("max_khz", "").isdigit():
        mhz = int(vals["max_khz"]) / 1000
    elif vals.get("cpu MHz"):
        try:
            mhz = float(vals["cpu MHz"])
        except ValueError:
            mhz = None
    return CpuProbe(cpus, mhz, frozenset(vals.get("flags", "").split()),
                    vals.get("model name", ""))


def flops_per_cycle(flags: Iterable[str]) -> int:
    """Double-precision flops per cycle per core that the CPU flags promise (two FMA
    units assumed for AVX-512 and AVX2 parts)."""
    f = set(flags)
    if "avx512f" in f and "fma" in f:
        return 32
    if "avx2" in f and "fma" in f:
        return 16
    if "avx" in f:
        return 8
    return 4 if "sse2" in f else 1


def peak_gflops(cores: int, mhz: float | None, flags: Iterable[str]) -> float | None:
    """Theoretical double-precision peak of ``cores`` cores, or None (unknown clock)."""
    if mhz is None or mhz <= 0 or cores <= 0:
        return None
    return cores * mhz / 1000 * flops_per_cycle(flags)


@dataclass(frozen=True)
class GpuProbe:
    index: int
    name: str
    mem_mib: float | None
    max_sm_mhz: float | None
    pcie_width: float | None = None  # lanes now
    pcie_width_max: float | None = None  # lanes the card and slot can do


def parse_gpus(text: str) -> list[GpuProbe]:
    """The GPUs ``nvidia-smi --query-gpu=index,name,memory.total,clocks.max.sm,
    pcie.link.width.current,pcie.link.width.max --format=csv,noheader,nounits`` listed
    (none for empty output; missing trailing columns are unknown)."""
    out: list[GpuProbe] = []

    def num(v: str) -> float | None:
        try:
            return float(v)
        except ValueError:
            return None  # "[N/A]"

    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [x.strip() for x in line.split(",")]
        if len(parts) < 2 or not parts[0].isdigit():
            raise ValueError(f"nvidia-smi line not 'index, name, memory, clock': {line!r}")
        col = [num(parts[i]) if len(parts) > i else None for i in range(2, 6)]
        out.append(GpuProbe(int(parts[0]), parts[1], *col))
    return out
