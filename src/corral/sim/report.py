"""Rich tables for simulation results (the side-by-side comparison the CLI prints)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rich import box
from rich.table import Table


def fmt_duration(seconds: float | None) -> str:
    """Compact human duration: ``42s``, ``13.5m``, ``7.2h``, ``3.1d``."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    s = float(seconds)
    if abs(s) < 60:
        return f"{s:.0f}s"
    if abs(s) < 3600:
        return f"{s / 60:.1f}m"
    if abs(s) < 86400:
        return f"{s / 3600:.1f}h"
    return f"{s / 86400:.1f}d"


def _num(x: float | None, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{digits}f}"


def comparison_table(summaries: Sequence[Mapping[str, Any]], title: str = "") -> Table:
    """One row per policy: waits, bounded slowdown, utilization (makespan definition),
    time-weighted mean queue length, Jain's fairness index over users' mean bounded
    slowdowns, jobs killed at their limit, and the simulation's wall time.

    The best value of each numeric column is bold (lowest wait/slowdown/queue, highest
    utilization).
    """
    cols: list[tuple[str, str, Any, bool]] = [
        # header, justify, getter, higher_is_better
        ("wait\nmean", "right", lambda s: s["wait_s"]["mean"], False),
        ("wait\np95", "right", lambda s: s["wait_s"]["p95"], False),
        ("wait\nmax", "right", lambda s: s["wait_s"]["max"], False),
        ("mean\nbsld", "right", lambda s: s["bsld"]["mean"], False),
        ("util", "right", lambda s: s["utilization"]["makespan"], True),
        ("mean\nqueue", "right", lambda s: s["queue_length"]["time_weighted_mean"], False),
        ("Jain", "right", lambda s: s["fairness"]["jain_mean_bsld"], True),
    ]
    table = Table(title=title or None, header_style="bold", box=box.SIMPLE_HEAD,
                  pad_edge=False, collapse_padding=True)
    table.add_column("policy", no_wrap=True)
    for name, just, _, _ in cols:
        table.add_column(name, justify=just, no_wrap=True)  # type: ignore[arg-type]
    table.add_column("jobs\nkilled", justify="right", no_wrap=True)
    table.add_column("sim\ntime", justify="right", no_wrap=True)

    best: list[float | None] = []
    for _, _, get, higher in cols:
        vals = [get(s) for s in summaries]
        vals = [v for v in vals if v is not None and not math.isnan(v)]
        best.append((max(vals) if higher else min(vals)) if vals and len(summaries) > 1
                    else None)

    for s in summaries:
        cells = [str(s["label"])]
        for k, (name, _, get, _) in enumerate(cols):
            v = get(s)
            if "wait" in name:
                text = fmt_duration(v)
            elif name in ("util", "Jain"):
                text = _num(v, 3)
            else:
                text = _num(v, 1)
            if best[k] is not None and v == best[k]:
                text = f"[bold]{text}[/bold]"
            cells.append(text)
        cells.append(f"{s['jobs']['timeout']:,}")
        wall = s.get("stats", {}).get("wall_s")
        cells.append("-" if wall is None else f"{wall:.1f}s")
        table.add_row(*cells)
    return table
