"""Standard Workload Format (SWF) reader and writer.

SWF (Feitelson et al., Parallel Workloads Archive) is a text format: header comment lines
start with ``;`` (``; MaxNodes: 128``), and every other non-empty line is one job with 18
whitespace-separated numeric fields (see ``FIELDS``). ``-1`` means "unknown". Files may be
gzip-compressed (``.gz``). Time fields may be fractional.

The reader keeps the whole trace as one ``(n, 18)`` float64 array, which is compact (a
447,794-job trace is 64 MB) and fast to select from; ``SwfTrace.column(name)`` gives a
field. Header lines are kept verbatim so that a trace written back keeps its provenance,
and the common header fields are parsed into ``SwfHeader``.
"""

from __future__ import annotations

import gzip
import re
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, cast

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

FIELDS: tuple[str, ...] = (
    "job_id",  # 1  job number, counting from 1
    "submit_s",  # 2  submit time, seconds from the log start
    "wait_s",  # 3  wait time (start - submit)
    "run_s",  # 4  run time (end - start)
    "procs_alloc",  # 5  allocated processors
    "cpu_avg_s",  # 6  average CPU time used per processor
    "mem_used_kb",  # 7  used memory per processor (KB)
    "procs_req",  # 8  requested processors
    "time_req_s",  # 9  requested time (the user's estimate)
    "mem_req_kb",  # 10 requested memory per processor (KB)
    "status",  # 11 1 completed, 0 failed, 5 cancelled
    "user_id",  # 12
    "group_id",  # 13
    "exe_id",  # 14 executable (application) number
    "queue_id",  # 15
    "partition_id",  # 16
    "prev_job_id",  # 17 preceding job number
    "think_s",  # 18 think time from the preceding job
)
N_FIELDS = len(FIELDS)
COL: dict[str, int] = {name: i for i, name in enumerate(FIELDS)}

_INT_HEADER_KEYS = ("MaxNodes", "MaxProcs", "MaxJobs", "MaxRecords", "UnixStartTime", "TimeZone",
                    "MaxRuntime", "MaxMemory", "MaxQueues", "MaxPartitions")
_KEY_RE = re.compile(r"^;\s*([A-Za-z][A-Za-z0-9_]*)\s*:\s?(.*)$")
_LEADING_INT_RE = re.compile(r"^\s*(-?\d+)")


class SwfError(ValueError):
    """A trace that is not valid SWF; the message names the file and line."""


@dataclass(frozen=True)
class SwfHeader:
    """Header comments: ``lines`` verbatim (without newlines) and ``fields`` parsed.

    ``fields`` maps a key to its value text; a key that occurs more than once (``Queue``)
    keeps every value in ``multi``. Numbers are read from the leading integer of the value,
    so ``MaxNodes: 338 (batch partition; 512 total)`` gives 338.
    """

    lines: tuple[str, ...] = ()
    fields: dict[str, str] = field(default_factory=dict)
    multi: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def get_int(self, key: str) -> int | None:
        text = self.fields.get(key)
        if text is None:
            return None
        m = _LEADING_INT_RE.match(text)
        return int(m.group(1)) if m else None

    @property
    def max_nodes(self) -> int | None:
        return self.get_int("MaxNodes")

    @property
    def max_procs(self) -> int | None:
        return self.get_int("MaxProcs")

    @property
    def unix_start_time(self) -> int | None:
        return self.get_int("UnixStartTime")

    @staticmethod
    def parse(lines: Iterable[str]) -> SwfHeader:
        kept: list[str] = []
        first: dict[str, str] = {}
        multi: dict[str, list[str]] = {}
        for raw in lines:
            line = raw.rstrip("\r\n")
            kept.append(line)
            m = _KEY_RE.match(line)
            if not m:
                continue
            key, value = m.group(1), m.group(2).strip()
            first.setdefault(key, value)
            multi.setdefault(key, []).append(value)
        return SwfHeader(
            tuple(kept), first, {k: tuple(v) for k, v in multi.items() if len(v) > 1}
        )

    @staticmethod
    def build(items: Sequence[tuple[str, object]], comments: Sequence[str] = ()) -> SwfHeader:
        """A header from ``(key, value)`` pairs plus free comment lines."""
        lines = [f"; {k}: {v}" for k, v in items] + [f"; {c}" if c else ";" for c in comments]
        return SwfHeader.parse(lines)


@dataclass(frozen=True)
class SwfTrace:
    """A whole trace: header plus an ``(n, 18)`` float64 array of jobs in file order."""

    header: SwfHeader
    data: FloatArray
    source: str = ""

    def __len__(self) -> int:
        return int(self.data.shape[0])

    def column(self, name: str) -> FloatArray:
        """One field as a float64 view, e.g. ``trace.column("run_s")``."""
        return self.data[:, COL[name]]

    def select(self, index: slice | npt.NDArray[np.bool_] | npt.NDArray[np.int64]) -> SwfTrace:
        """Rows by a slice, index array or boolean mask (header kept)."""
        return SwfTrace(self.header, self.data[index], self.source)

    @property
    def max_nodes(self) -> int | None:
        return self.header.max_nodes

    @property
    def max_procs(self) -> int | None:
        """MaxProcs from the header, or MaxNodes when the header has no MaxProcs."""
        return self.header.max_procs or self.header.max_nodes


def _open_text(path: Path, mode: str) -> IO[str]:
    if path.suffix == ".gz":
        return cast(IO[str], gzip.open(path, mode + "t", encoding="ascii", errors="replace"))
    return open(path, mode, encoding="ascii", errors="replace")


def _job_lines(f: Iterable[str], header: list[str]) -> Iterator[str]:
    """Yield job lines; collect comment lines (anywhere in the file) into ``header``."""
    for line in f:
        s = line.lstrip()
        if not s:
            continue
        if s[0] == ";":
            header.append(line)
            continue
        yield line


def _find_bad_line(path: Path) -> str:
    """Slow path after a failed fast parse: name the first malformed job line."""
    with _open_text(path, "r") as f:
        for lineno, line in enumerate(f, 1):
            s = line.strip()
            if not s or s.startswith(";"):
                continue
            parts = s.split()
            if len(parts) != N_FIELDS:
                return (f"{path}:{lineno}: expected {N_FIELDS} fields, found {len(parts)}: "
                        f"{s[:120]!r}")
            for i, p in enumerate(parts):
                try:
                    float(p)
                except ValueError:
                    return (f"{path}:{lineno}: field {i + 1} ({FIELDS[i]}) is not a number: "
                            f"{p!r}")
    return f"{path}: malformed SWF"


def read_swf(path: str | Path) -> SwfTrace:
    """Read a ``.swf`` or ``.swf.gz`` file. Raises ``SwfError`` naming the bad line."""
    p = Path(path)
    if not p.exists():
        raise SwfError(f"{p}: no such trace file")
    header_lines: list[str] = []
    try:
        with _open_text(p, "r") as f, warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "input contained no data"
            data = np.loadtxt(_job_lines(f, header_lines), dtype=np.float64, ndmin=2)
    except (ValueError, IndexError) as exc:
        raise SwfError(_find_bad_line(p)) from exc
    except (OSError, EOFError) as exc:  # gzip errors
        raise SwfError(f"{p}: cannot read: {exc}") from exc
    if data.size == 0:
        data = np.empty((0, N_FIELDS), dtype=np.float64)
    elif data.shape[1] != N_FIELDS:
        raise SwfError(_find_bad_line(p))
    return SwfTrace(SwfHeader.parse(header_lines), data, str(p))


def _fmt(v: float) -> str:
    if v == int(v):
        return str(int(v))
    return f"{v:.2f}"


def format_job(row: Sequence[float] | FloatArray) -> str:
    """One SWF job line: integers where the value is integral, else two decimals."""
    return " ".join(_fmt(float(v)) for v in row)


def write_swf(path: str | Path, trace: SwfTrace) -> None:
    """Write ``trace`` as SWF (gzip when the name ends in ``.gz``)."""
    p = Path(path)
    with _open_text(p, "w") as f:
        for line in trace.header.lines:
            f.write(line if line.startswith(";") else "; " + line)
            f.write("\n")
        # integral columns go through the fast integer formatter
        data = trace.data
        integral = np.all(data == np.floor(data), axis=0)
        cols: list[list[str]] = []
        for i in range(N_FIELDS):
            col = data[:, i]
            if integral[i]:
                cols.append([str(v) for v in col.astype(np.int64).tolist()])
            else:
                cols.append([_fmt(v) for v in col.tolist()])
        for row in zip(*cols, strict=True):
            f.write(" ".join(row))
            f.write("\n")


def trace_from_columns(
    header: SwfHeader, columns: dict[str, Sequence[float] | FloatArray], n: int
) -> SwfTrace:
    """A trace of ``n`` jobs from named columns; fields not given are -1 (unknown).

    This is how other parts of Corral export history (e.g. a cluster's accounting) as SWF:
    ``trace_from_columns(SwfHeader.build([("MaxNodes", 16)]), {"job_id": ids, ...}, n)``.
    """
    data = np.full((n, N_FIELDS), -1.0, dtype=np.float64)
    for name, values in columns.items():
        if name not in COL:
            raise KeyError(f"unknown SWF field {name!r}; fields are {', '.join(FIELDS)}")
        arr = np.asarray(values, dtype=np.float64)
        if arr.shape != (n,):
            raise ValueError(f"field {name!r} has {arr.shape[0]} values, expected {n}")
        data[:, COL[name]] = arr
    return SwfTrace(header, data)
