"""Rich tables for simulation results (the side-by-side comparison the CLI prints)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table


def fmt_duration(seconds: float | None) -> str:
    """Compact human duration: ``42 s``, ``13.5 m``, ``7.2 h``, ``3.1 d``."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "-"
    s = float(seconds)
    if abs(s) < 60:
        return f"{s:.0f} s"
    if abs(s) < 3600:
        return f"{s / 60:.1f} m"
    if abs(s) < 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def _num(x: float | None, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{digits}f}"


def comparison_table(summaries: Sequence[Mapping[str, Any]], title: str = "") -> Table:
    """One row per policy: waits, bounded slowdown, utilization, queue, kills, speed.

    The best value of each numeric column is bold (lowest wait/slowdown/queue, highest
    utilization).
    """
    cols: list[tuple[str, str, Any, bool]] = [
        # header, justify, getter, higher_is_better
        ("mean wait", "right", lambda s: s["wait_s"]["mean"], False),
        ("median wait", "right", lambda s: s["wait_s"]["median"], False),
        ("p95 wait", "right", lambda s: s["wait_s"]["p95"], False),
        ("max wait", "right", lambda s: s["wait_s"]["max"], False),
        ("mean bsld", "right", lambda s: s["bsld"]["mean"], False),
        ("util", "right", lambda s: s["utilization"]["makespan"], True),
        ("util (arrivals)", "right", lambda s: s["utilization"]["arrival_window"], True),
        ("mean queue", "right", lambda s: s["queue_length"]["time_weighted_mean"], False),
        ("fairness (Jain)", "right", lambda s: s["fairness"]["jain_mean_bsld"], True),
    ]
    table = Table(title=title or None, header_style="bold")
    table.add_column("policy", no_wrap=True)
    table.add_column("jobs", justify="right")
    for name, just, _, _ in cols:
        table.add_column(name, justify=just)  # type: ignore[arg-type]
    table.add_column("killed", justify="right")
    table.add_column("sim time", justify="right")

    best: list[float | None] = []
    for _, _, get, higher in cols:
        vals = [get(s) for s in summaries]
        vals = [v for v in vals if v is not None and not math.isnan(v)]
        best.append((max(vals) if higher else min(vals)) if vals and len(summaries) > 1
                    else None)

    for s in summaries:
        cells = [str(s["label"]), f"{s['jobs']['started']:,}"]
        for k, (name, _, get, _) in enumerate(cols):
            v = get(s)
            if "wait" in name:
                text = fmt_duration(v)
            elif name.startswith(("util", "fairness")):
                text = _num(v, 3)
            elif name == "mean queue":
                text = _num(v, 1)
            else:
                text = _num(v, 2)
            if best[k] is not None and v == best[k]:
                text = f"[bold]{text}[/bold]"
            cells.append(text)
        cells.append(f"{s['jobs']['timeout']:,}")
        wall = s.get("stats", {}).get("wall_s")
        cells.append("-" if wall is None else f"{wall:.1f} s")
        table.add_row(*cells)
    return table
