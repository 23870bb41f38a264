"""From an SWF trace to a simulation workload: cleaning, estimates, job selection.

Policies (each one a documented choice, reported in the run's output):

* ``procs``: which processor count a job asks for. ``max`` (default) takes
  ``max(allocated, requested)`` as RLScheduler and most simulators do (the two fields are
  mixed up in several logs); ``requested`` and ``allocated`` take one field, falling back
  to the other when it is unknown.
* ``unknown_runtime``: jobs whose run time is -1 never ran or were not logged; they are
  dropped by default (``drop``), or given a fixed run time in seconds.
* ``missing_estimate``: jobs without a user estimate (field 9 is -1 or 0). ``runtime``
  (default) uses the actual run time, i.e. a perfect estimate, the usual choice in the
  literature for logs with no estimates at all (Lublin, NASA-iPSC); ``default`` uses
  ``default_estimate_s`` (what a site's default time limit would do; with kill-at-limit it
  kills every longer job); ``max`` uses the largest estimate found in the trace.
* ``exceed`` (applied by the engine): a job running past its estimate is killed at the
  limit (``kill``, default) as Slurm/PBS do, so backfill reservations hold and the
  simulated machine matches a real scheduler's; ``run`` lets it finish as logged, as some
  published studies did (RLScheduler).

Selection: ``all``; ``N`` (first N jobs); ``A:B`` (0-based slice, Python style);
``id:A-B`` (job ids A..B inclusive); and sampled sequences (``COUNTxLENGTH`` with a seed,
each replayed on an empty machine). Selection applies after cleaning, in submit order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from enum import Enum

import numpy as np
import numpy.typing as npt

from corral.sim.swf import COL, SwfTrace

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class ProcsField(str, Enum):
    MAX = "max"
    REQUESTED = "requested"
    ALLOCATED = "allocated"


class MissingEstimate(str, Enum):
    RUNTIME = "runtime"
    DEFAULT = "default"
    MAX = "max"


class ExceedPolicy(str, Enum):
    KILL = "kill"
    RUN = "run"


@dataclass(frozen=True, slots=True)
class LoadOptions:
    procs: ProcsField = ProcsField.MAX
    unknown_runtime_s: int | None = None  # None: drop jobs with run time -1
    drop_zero_runtime: bool = False
    missing_estimate: MissingEstimate = MissingEstimate.RUNTIME
    default_estimate_s: int = 3600


@dataclass(frozen=True)
class Workload:
    """Cleaned jobs in submit order (stable on file order), as column arrays.

    ``run_s`` is the logged run time (>= 0); ``limit_s`` the time limit the scheduler
    sees (>= 1). ``row`` indexes the source trace, for writing the schedule back.
    """

    job_id: IntArray
    submit_s: FloatArray
    run_s: FloatArray
    limit_s: FloatArray
    procs: IntArray
    user_id: IntArray
    group_id: IntArray
    queue_id: IntArray
    partition_id: IntArray
    row: IntArray
    max_nodes: int
    max_procs: int
    source: str = ""
    dropped: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.job_id.shape[0])

    def take(self, index: slice | IntArray) -> Workload:
        return replace(
            self,
            job_id=self.job_id[index], submit_s=self.submit_s[index], run_s=self.run_s[index],
            limit_s=self.limit_s[index], procs=self.procs[index], user_id=self.user_id[index],
            group_id=self.group_id[index], queue_id=self.queue_id[index],
            partition_id=self.partition_id[index], row=self.row[index],
        )


def machine_of(trace: SwfTrace) -> tuple[int, int]:
    """(MaxNodes, MaxProcs) from the header; the largest job when the header has neither."""
    nodes, procs = trace.header.max_nodes, trace.header.max_procs
    if nodes is None and procs is None:
        biggest = int(max(trace.column("procs_alloc").max(initial=1),
                          trace.column("procs_req").max(initial=1)))
        return biggest, biggest
    if nodes is None:
        assert procs is not None
        return procs, procs
    return nodes, procs if procs is not None else nodes


def build_workload(trace: SwfTrace, options: LoadOptions | None = None) -> Workload:
    """Clean ``trace`` per ``options``; counts of dropped jobs go to ``Workload.dropped``."""
    o = options or LoadOptions()
    d = trace.data
    alloc, req = d[:, COL["procs_alloc"]], d[:, COL["procs_req"]]
    if o.procs is ProcsField.MAX:
        procs = np.maximum(alloc, req)
    elif o.procs is ProcsField.REQUESTED:
        procs = np.where(req > 0, req, alloc)
    else:
        procs = np.where(alloc > 0, alloc, req)
    run = d[:, COL["run_s"]].copy()
    submit = d[:, COL["submit_s"]]
    dropped: dict[str, int] = {}
    keep = np.ones(len(trace), dtype=bool)

    def drop(mask: npt.NDArray[np.bool_], reason: str) -> None:
        n = int(np.count_nonzero(mask & keep))
        if n:
            dropped[reason] = n
        keep[mask] = False

    unknown = run < 0
    if o.unknown_runtime_s is None:
        drop(unknown, "unknown_runtime")
    else:
        run[unknown] = float(o.unknown_runtime_s)
    if o.drop_zero_runtime:
        drop(run == 0, "zero_runtime")
    drop(procs <= 0, "unknown_procs")
    drop(submit < 0, "unknown_submit")

    est = d[:, COL["time_req_s"]].copy()
    missing = est <= 0
    if o.missing_estimate is MissingEstimate.RUNTIME:
        est[missing] = run[missing]
    elif o.missing_estimate is MissingEstimate.DEFAULT:
        est[missing] = float(o.default_estimate_s)
    else:
        known = est[~missing & keep]
        fallback = float(known.max()) if known.size else float(run[keep].max(initial=1.0))
        est[missing] = fallback
    est = np.maximum(np.ceil(est), 1.0)

    idx = np.flatnonzero(keep)
    order = idx[np.argsort(submit[idx], kind="stable")]
    max_nodes, max_procs = machine_of(trace)

    def icol(name: str) -> IntArray:
        out: IntArray = d[order, COL[name]].astype(np.int64)
        return out

    return Workload(
        job_id=icol("job_id"), submit_s=submit[order].astype(np.float64),
        run_s=run[order], limit_s=est[order], procs=procs[order].astype(np.int64),
        user_id=icol("user_id"), group_id=icol("group_id"), queue_id=icol("queue_id"),
        partition_id=icol("partition_id"), row=order.astype(np.int64),
        max_nodes=max_nodes, max_procs=max_procs, source=trace.source, dropped=dropped,
    )


_SLICE_RE = re.compile(r"^(-?\d*):(-?\d*)$")
_ID_RE = re.compile(r"^id:(\d+)-(\d+)$")
_SAMPLE_RE = re.compile(r"^(\d+)x(\d+)$")


def select(wl: Workload, spec: str | None) -> Workload:
    """Apply a selection spec (``all``, ``N``, ``A:B``, ``id:A-B``); see the module doc."""
    if spec is None or spec.strip().lower() in ("", "all"):
        return wl
    s = spec.strip()
    if s.isdigit():
        return wl.take(slice(0, int(s)))
    m = _SLICE_RE.match(s)
    if m:
        a = int(m.group(1)) if m.group(1) else None
        b = int(m.group(2)) if m.group(2) else None
        return wl.take(slice(a, b))
    m = _ID_RE.match(s)
    if m:
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo > hi:
            raise ValueError(f"job selection {spec!r}: the first id is larger than the last")
        return wl.take(np.flatnonzero((wl.job_id >= lo) & (wl.job_id <= hi)))
    raise ValueError(
        f"job selection {spec!r} not understood; use all, N, A:B (0-based slice) or id:A-B"
    )


def parse_sample(spec: str) -> tuple[int, int]:
    """``COUNTxLENGTH`` (e.g. ``10x1024``) -> (count, length)."""
    m = _SAMPLE_RE.match(spec.strip())
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise ValueError(f"sample {spec!r} not understood; use COUNTxLENGTH, e.g. 10x1024")
    return int(m.group(1)), int(m.group(2))


def sample_starts(n_jobs: int, count: int, length: int, seed: int) -> list[int]:
    """Start indices of ``count`` sequences of ``length`` jobs (numpy PCG64, seeded)."""
    if length > n_jobs:
        raise ValueError(f"sequence length {length} exceeds the {n_jobs} jobs selected")
    rng = np.random.default_rng(seed)
    return [int(x) for x in rng.integers(0, n_jobs - length + 1, size=count)]


def sequences(wl: Workload, count: int, length: int, seed: int) -> list[Workload]:
    return [wl.take(slice(s, s + length)) for s in sample_starts(len(wl), count, length, seed)]
