"""Report pictures (matplotlib, Agg backend; PNG or SVG by the file's suffix).

* ``plot_utilization``: allocated CPUs (and GPUs when the cluster has any) over the
  report window against the capacity, with the number of waiting jobs on a second axis;
* ``plot_usage``: allocated CPU-hours per user or account as horizontal bars;
* ``plot_efficiency``: CPU and memory efficiency of one job as two bars against 100 %.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from corral.ops.accounting import SeriesPoint, UsageRow
from corral.ops.efficiency import Efficiency


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: str | Path) -> Path:
    p = Path(path)
    if p.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ValueError(f"{p}: the plot file must end in .png, .svg or .pdf")
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    return p


def _time_axis(points: Sequence[SeriesPoint]) -> tuple[list[float], str]:
    """Hours (or days) relative to the window's end, and the axis label."""
    if not points:
        return [], "time"
    end = points[-1].end
    span = end - points[0].start
    unit, name = (86400.0, "days") if span > 3 * 86400 else (
        (3600.0, "hours") if span > 3 * 3600 else (60.0, "minutes"))
    stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(end))
    return [(p.start + p.end) / 2.0 / unit - end / unit for p in points], \
        f"{name} before {stamp}"


def plot_utilization(points: Sequence[SeriesPoint], total_cpus: int, total_gpus: int,
                     path: str | Path, title: str = "Cluster utilization") -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.2))
    x, label = _time_axis(points)
    ax.step(x, [p.cpus for p in points], where="mid", color="#1f77b4",
            label="allocated CPUs")
    ax.axhline(total_cpus, color="#1f77b4", linestyle=":", linewidth=1,
               label=f"CPUs ({total_cpus})")
    if total_gpus:
        ax.step(x, [p.gpus for p in points], where="mid", color="#2ca02c",
                label="allocated GPUs")
        ax.axhline(total_gpus, color="#2ca02c", linestyle=":", linewidth=1,
                   label=f"GPUs ({total_gpus})")
    ax.set_xlabel(label)
    ax.set_ylabel("allocated")
    ax.set_ylim(bottom=0, top=max(total_cpus, total_gpus, 1) * 1.08)
    ax2 = ax.twinx()
    ax2.plot(x, [p.pending for p in points], color="#d62728", alpha=0.7,
             label="pending jobs")
    ax2.set_ylabel("pending jobs")
    ax2.set_ylim(0, max([1] + [p.pending for p in points]) * 1.1)
    ax2.yaxis.get_major_locator().set_params(integer=True)
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper left", fontsize=8)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_usage(rows: Sequence[UsageRow], path: str | Path, by: str = "user",
               title: str | None = None) -> Path:
    plt = _pyplot()
    shown = list(rows)[:25]
    fig, ax = plt.subplots(figsize=(8, 0.45 * max(len(shown), 2) + 1.2))
    names = [r.key for r in shown][::-1]
    hours = [r.cpu_s / 3600.0 for r in shown][::-1]
    ax.barh(names, hours, color="#1f77b4")
    for y, h in enumerate(hours):
        ax.text(h, y, f" {h:.2f}", va="center", fontsize=8)
    ax.set_xlabel("allocated CPU-hours")
    ax.set_title(title or f"Usage by {by}")
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def plot_efficiency(e: Efficiency, path: str | Path) -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 2.4))
    vals = [100 * (e.cpu_efficiency or 0.0), 100 * (e.mem_efficiency or 0.0)]
    names = ["CPU", "memory"]
    ax.barh(names, [100, 100], color="#e0e0e0")
    ax.barh(names, vals, color=["#1f77b4", "#ff7f0e"])
    for y, (v, known) in enumerate(zip(vals, (e.cpu_efficiency, e.mem_efficiency),
                                       strict=True)):
        ax.text(min(v, 100) + 1, y, f"{v:.1f} %" if known is not None else "unknown",
                va="center", fontsize=9)
    ax.set_xlim(0, 115)
    ax.set_xlabel("% of what the job held")
    ax.set_title(f"Efficiency of job {e.job_id} ({e.state})")
    return _save(fig, path)
