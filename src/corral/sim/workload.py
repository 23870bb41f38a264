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
    # Where each dropped job was: ``dropped_pos[r][k]`` is how many kept jobs precede the
    # k-th job dropped for reason r (in the same stable submit order), ``dropped_id`` its
    # job id. ``select`` uses them so ``dropped`` counts only the selection's span.
    dropped_pos: dict[str, IntArray] = field(default_factory=dict)
    dropped_id: dict[str, IntArray] = field(default_factory=dict)

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
    reason_rows: dict[str, IntArray] = {}
    keep = np.ones(len(trace), dtype=bool)

    def drop(mask: npt.NDArray[np.bool_], reason: str) -> None:
        rows = np.flatnonzero(mask & keep)
        if rows.size:
            dropped[reason] = int(rows.size)
            reason_rows[reason] = rows
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
    # position of every row in the stable submit order of all rows, and how many kept rows
    # come before each position: a dropped row's place among the kept jobs
    everything = np.argsort(submit, kind="stable")
    rank = np.empty(len(trace), dtype=np.int64)
    rank[everything] = np.arange(len(trace), dtype=np.int64)
    kept_before = np.cumsum(keep[everything]) - keep[everything]
    dropped_pos = {r: kept_before[rank[rows]].astype(np.int64)
                   for r, rows in reason_rows.items()}
    dropped_id = {r: d[rows, COL["job_id"]].astype(np.int64)
                  for r, rows in reason_rows.items()}

    def icol(name: str) -> IntArray:
        out: IntArray = d[order, COL[name]].astype(np.int64)
        return out

    return Workload(
        job_id=icol("job_id"), submit_s=submit[order].astype(np.float64),
        run_s=run[order], limit_s=est[order], procs=procs[order].astype(np.int64),
        user_id=icol("user_id"), group_id=icol("group_id"), queue_id=icol("queue_id"),
        partition_id=icol("partition_id"), row=order.astype(np.int64),
        max_nodes=max_nodes, max_procs=max_procs, source=trace.source, dropped=dropped,
        dropped_pos=dropped_pos, dropped_id=dropped_id,
    )


_SLICE_RE = re.compile(r"^(-?\d*):(-?\d*)$")
_ID_RE = re.compile(r"^id:(\d+)-(\d+)$")
_SAMPLE_RE = re.compile(r"^(\d+)x(\d+)$")


def _dropped_in_span(wl: Workload, a: int, b: int) -> dict[str, int]:
    """Dropped jobs that lay among kept jobs ``a..b-1`` (a dropped job counts with the
    kept job that follows it; those after the last kept job count with a span that
    reaches the end)."""
    n = len(wl)
    out: dict[str, int] = {}
    for reason, pos in wl.dropped_pos.items():
        inside = (pos >= a) & ((pos < b) | (b >= n))
        count = int(np.count_nonzero(inside))
        if count:
            out[reason] = count
    return out


def select(wl: Workload, spec: str | None) -> Workload:
    """Apply a selection spec (``all``, ``N``, ``A:B``, ``id:A-B``); see the module doc.

    ``dropped`` of the result counts only the jobs dropped while reading that the
    selection would have held: for ``N`` and ``A:B`` those in the selected stretch of the
    trace, for ``id:A-B`` those with an id in the range.
    """
    if spec is None or spec.strip().lower() in ("", "all"):
        return wl
    s = spec.strip()
    n = len(wl)
    if s.isdigit():
        b = min(int(s), n)
        return replace(wl.take(slice(0, b)), dropped=_dropped_in_span(wl, 0, b))
    m = _SLICE_RE.match(s)
    if m:
        a0 = int(m.group(1)) if m.group(1) else None
        b0 = int(m.group(2)) if m.group(2) else None
        a, b, _ = slice(a0, b0).indices(n)
        if b <= a:
            return replace(wl.take(slice(a0, b0)), dropped={})
        return replace(wl.take(slice(a0, b0)), dropped=_dropped_in_span(wl, a, b))
    m = _ID_RE.match(s)
    if m:
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo > hi:
            raise ValueError(f"job selection {spec!r}: the first id is larger than the last")
        counts = {r: int(np.count_nonzero((ids >= lo) & (ids <= hi)))
                  for r, ids in wl.dropped_id.items()}
        return replace(wl.take(np.flatnonzero((wl.job_id >= lo) & (wl.job_id <= hi))),
                       dropped={r: c for r, c in counts.items() if c})
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
