"""Memory sizes as Slurm and PBS write them, both ways. Units are binary (1G = 1024M).

Slurm (``--mem``, ``--mem-per-cpu``, ``--mem-per-gpu``, ``RealMemory``): a number with an
optional unit ``K``, ``M``, ``G`` or ``T`` (any case, optionally followed by ``B`` or
``iB``: ``4G``, ``4GB``, ``4GiB``); a bare number is megabytes, as in Slurm. A decimal
fraction is accepted (``1.5G``) and the result rounds up to whole megabytes, as does a
size in kilobytes (``1K`` is 1 MB). ``0`` is returned as 0 (Slurm: "all the memory of the
node"); the caller gives it that meaning.

PBS (``-l mem=``, ``vmem``, ``pmem``): ``integer[suffix]`` where a bare number is BYTES and
the suffix is ``b``, ``kb``, ``mb``, ``gb``, ``tb``, ``pb`` (or ``w``, ``kw``... for 8-byte
words), any case; ``k``/``m``/``g``/``t`` without the ``b`` are accepted too.

Formatters print the largest unit that divides the size exactly: ``format_mem_mb(4096)``
is ``4G`` (as ``scontrol show job`` prints ``MinMemoryNode=4G``), ``format_mem_mb(100)`` is
``100M``; ``format_pbs_size_bytes(4 * 2**30)`` is ``4gb``.
"""

from __future__ import annotations

import math
import re

from corral.core.parse.errors import ParseError

_SLURM = re.compile(r"^(\d+(?:\.\d+)?)(?:([KMGTP])(?:I?B)?)?$", re.IGNORECASE)
_SLURM_SHIFT_KB = {"K": 0, "M": 1, "G": 2, "T": 3, "P": 4}  # powers of 1024 over 1 KB
_PBS = re.compile(r"^(\d+)([KMGTP]?)([BW]?)$", re.IGNORECASE)
_PBS_SHIFT = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}


def parse_mem_mb(text: str, *, default_unit: str = "M") -> int:
    """Megabytes of a Slurm memory size (``"4G"`` -> 4096; ``"500"`` -> 500).

    ``default_unit`` is the unit of a bare number (``"M"`` as Slurm; ``"G"`` for flags that
    document gigabytes). Raises ``ParseError`` naming the bad text.
    """
    s = text.strip()
    m = _SLURM.match(s)
    if not m:
        raise ParseError(
            "memory size", text, "expected a number with an optional unit K, M, G or T (e.g. 4G)"
        )
    number, unit = m.group(1), (m.group(2) or default_unit).upper()
    if unit not in _SLURM_SHIFT_KB:
        raise ParseError("memory size", text, f"unknown default unit {default_unit!r}")
    scale_kb = 1 << (10 * _SLURM_SHIFT_KB[unit])
    if "." in number:
        return math.ceil(float(number) * scale_kb / 1024)
    return -(-int(number) * scale_kb // 1024)


def format_mem_mb(mem_mb: int) -> str:
    """Slurm style: the largest of M, G, T that divides exactly (``4096`` -> ``4G``)."""
    if mem_mb < 0:
        raise ValueError(f"negative memory size {mem_mb!r}")
    for unit, shift in (("T", 2), ("G", 1)):
        div = 1024**shift
        if mem_mb and mem_mb % div == 0:
            return f"{mem_mb // div}{unit}"
    return f"{mem_mb}M"


def parse_pbs_size_bytes(text: str) -> int:
    """Bytes of a PBS size: bare number = bytes; ``kb``, ``mb``, ``gb``, ``tb``, ``pb``, words."""
    s = text.strip()
    m = _PBS.match(s)
    if not m:
        raise ParseError(
            "PBS size", text, "expected an integer with an optional suffix b, kb, mb, gb, tb"
        )
    number, mult, word = m.group(1), m.group(2).upper(), m.group(3).upper()
    size = int(number) << (10 * _PBS_SHIFT[mult])
    return size * 8 if word == "W" else size


def parse_pbs_size_mb(text: str) -> int:
    """Megabytes (rounded up) of a PBS size, for the model's ``*_mb`` fields."""
    return -(-parse_pbs_size_bytes(text) // (1024 * 1024))


def format_pbs_size_bytes(size_bytes: int) -> str:
    """PBS style: the largest of b, kb, mb, gb, tb that divides exactly (``1024`` -> ``1kb``)."""
    if size_bytes < 0:
        raise ValueError(f"negative size {size_bytes!r}")
    for unit, shift in (("tb", 4), ("gb", 3), ("mb", 2), ("kb", 1)):
        div = 1024**shift
        if size_bytes and size_bytes % div == 0:
            return f"{size_bytes // div}{unit}"
    return f"{size_bytes}b"


def format_pbs_size_mb(mem_mb: int) -> str:
    """A size in MB printed the PBS way (``4096`` -> ``4gb``)."""
    return format_pbs_size_bytes(mem_mb * 1024 * 1024)
