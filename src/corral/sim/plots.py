"""Pictures of simulation runs (matplotlib, Agg backend; PNG or SVG by file suffix).

* ``plot_timeseries``: utilization and queue length over time, one line per run. Long
  traces are averaged into time bins (exact time-weighted means of the step functions).
* ``plot_wait_cdf``: the empirical CDF of wait time per run (log time axis).
* ``plot_gantt``: which job ran where during a time window, one row per node (needs the
  allocations recorded by the engine) or, without them, one bar per job stacked by start.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from corral.sim.result import SimResult

FloatArray = npt.NDArray[np.float64]
DAY_S = 86400.0


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def binned_step_mean(
    t: FloatArray, v: FloatArray, t_end: float, bins: int
) -> tuple[FloatArray, FloatArray]:
    """Time-weighted mean of a step function (``v[i]`` holds on ``[t[i], t[i+1])``) per bin.

    Returns bin centres and means. Exact: the integral of a step function is piecewise
    linear, so interpolating it at the bin edges loses nothing.
    """
    if t.size == 0:
        return np.empty(0), np.empty(0)
    t_end = max(t_end, float(t[-1]))
    knots = np.append(t, t_end)
    integral = np.concatenate(([0.0], np.cumsum(v * np.diff(knots))))
    if t_end <= t[0]:
        return np.array([float(t[0])]), np.array([float(v[-1])])
    edges = np.linspace(float(t[0]), t_end, bins + 1)
    at = np.interp(edges, knots, integral)
    means = np.diff(at) / np.diff(edges)
    return (edges[:-1] + edges[1:]) / 2, means


def _end(res: SimResult) -> float:
    ends = res.end_s[~np.isnan(res.end_s)]
    last = float(ends.max()) if ends.size else 0.0
    return max(last, float(res.samples_t[-1]) if res.samples_t.size else 0.0)


def plot_timeseries(results: Sequence[SimResult], path: str | Path, *, bins: int = 400) -> None:
    """Utilization (CPUs busy / CPUs) and pending jobs over time, days since first submit."""
    plt = _pyplot()
    fig, (ax_u, ax_q) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for res in results:
        if res.samples_t.size == 0:
            continue
        t0 = float(res.workload.submit_s.min())
        end = _end(res)
        x, util = binned_step_mean(res.samples_t, res.samples_busy_cpus / res.total_cpus,
                                   end, bins)
        _, queue = binned_step_mean(res.samples_t, res.samples_pending, end, bins)
        ax_u.plot((x - t0) / DAY_S, util, label=res.label, linewidth=1)
        ax_q.plot((x - t0) / DAY_S, queue, label=res.label, linewidth=1)
    ax_u.set_ylabel("utilization")
    ax_u.set_ylim(0, 1.05)
    ax_q.set_ylabel("pending jobs")
    ax_q.set_xlabel("days since first submit")
    ax_u.legend(loc="lower right", fontsize="small")
    ax_u.grid(alpha=0.3)
    ax_q.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(str(path))
    plt.close(fig)


def plot_wait_cdf(results: Sequence[SimResult], path: str | Path) -> None:
    """Fraction of jobs that waited at most x seconds (x on a log axis, from 1 s)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for res in results:
        w = np.sort((res.start_s - res.workload.submit_s)[res.started])
        if w.size == 0:
            continue
        y = np.arange(1, w.size + 1) / w.size
        ax.step(np.maximum(w, 1.0), y, where="post", label=res.label, linewidth=1.2)
    ax.set_xscale("log")
    ax.set_xlabel("wait time (s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0, 1.0)
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    fig.savefig(str(path))
    plt.close(fig)


def default_window(res: SimResult, hours: float = 48.0) -> tuple[float, float]:
    """A window of ``hours`` starting at the median start time."""
    starts = res.start_s[res.started]
    if starts.size == 0:
        return 0.0, hours * 3600
    a = float(np.median(starts))
    return a, a + hours * 3600


def plot_gantt(
    res: SimResult, path: str | Path, window: tuple[float, float] | None = None,
    *, max_jobs: int = 4000,
) -> None:
    """Jobs running during ``window`` (trace seconds): one row per node when allocations
    were recorded, else one bar per job (height = CPUs) stacked in start order."""
    plt = _pyplot()
    a, b = window or default_window(res)
    started = res.started
    ends = np.where(np.isnan(res.end_s), b, res.end_s)
    idx = np.flatnonzero(started & (res.start_s < b) & (ends > a))[:max_jobs]
    fig, ax = plt.subplots(figsize=(11, 6))
    cmap = plt.get_cmap("tab20")
    if res.allocations:
        for k, j in enumerate(idx.tolist()):
            nodes = res.allocations.get(j, ())
            lo, hi = max(float(res.start_s[j]), a), min(float(ends[j]), b)
            bars = [(lo / 3600, (hi - lo) / 3600)]
            for n in nodes:
                ax.broken_barh(bars, (n, 0.9), facecolors=cmap(k % 20), linewidth=0)
        ax.set_ylabel("node index")
        ax.set_ylim(0, max(res.total_nodes, 1))
    else:
        y = 0.0
        for k, j in enumerate(idx.tolist()):
            lo, hi = max(float(res.start_s[j]), a), min(float(ends[j]), b)
            h = float(res.alloc_cpus[j])
            ax.broken_barh([(lo / 3600, (hi - lo) / 3600)], (y, h), facecolors=cmap(k % 20),
                           linewidth=0)
            y += h
        ax.set_ylabel("CPUs (jobs stacked by start)")
    ax.set_xlim(a / 3600, b / 3600)
    ax.set_xlabel("hours since trace start")
    ax.set_title(f"{res.label}: {len(idx)} jobs in [{a / 3600:.1f} h, {b / 3600:.1f} h]")
    fig.tight_layout()
    fig.savefig(str(path))
    plt.close(fig)
