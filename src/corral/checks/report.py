"""A check run as data, as a Markdown report with pictures, and the history of runs.

``run_record`` is the JSON kept for every run (``<state dir>/checks/reports/<run id>/
result.json``): plan, per-node and per-link measurements, verdicts. ``node_rows`` is the
table's content (one row per node, its verdict kinds). ``write_report`` adds
``report.md`` with a node x node ping-pong bandwidth heat map (``heatmap.png``) and per-node
HPL and fio bars (``nodes.png``); ``history`` reads every kept run, oldest first.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from corral.checks.verdict import AllNodesResult, LinkResult, NodeResult, Verdict, best_links


def run_record(run_id: str, started: float, ended: float, nodes: Sequence[NodeResult],
               links: Sequence[LinkResult], verdicts: Sequence[Verdict],
               plan: Mapping[str, Any],
               together: AllNodesResult | None = None) -> dict[str, Any]:
    rec = {"run_id": run_id, "started": started, "ended": ended, "plan": dict(plan),
           "nodes": [{**asdict(n), "storage": dict(n.storage), "efficiency": n.efficiency}
                     for n in nodes],
           "links": [asdict(lk) for lk in links],
           "verdicts": [v.to_json() for v in verdicts],
           "ok": not verdicts}
    if together is not None:
        rec["all_nodes"] = {**asdict(together), "many_seq_mb_s": dict(together.many_seq_mb_s),
                            "efficiency": together.efficiency}
    return rec


def node_rows(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    links = [LinkResult(**lk) for lk in record.get("links", [])]
    best = best_links(links)
    names = sorted({n["name"] for n in record.get("nodes", [])} | set(best))
    by = {n["name"]: n for n in record.get("nodes", [])}
    kinds: dict[str, set[str]] = {}
    for v in record.get("verdicts", []):
        for part in str(v["subject"]).split("~"):
            kinds.setdefault(part, set()).add(v["kind"])
    rows = []
    for name in names:
        n = by.get(name, {})
        st = n.get("storage") or {}
        bw, lat = best.get(name, (None, None))
        rows.append({"node": name, "best_bandwidth_mb_s": bw, "best_latency_us": lat,
                     "hpl_gflops": n.get("hpl_gflops"), "efficiency": n.get("efficiency"),
                     "stream_gb_s": n.get("stream_gb_s"),
                     "local_seq_mb_s": st.get("local_seq_mb_s"),
                     "local_rand_iops": st.get("local_rand_iops"),
                     "shared_seq_mb_s": st.get("shared_seq_mb_s"),
                     "status": ",".join(sorted(kinds.get(name, ()))) or "ok"})
    return rows


def fmt(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}" if abs(v) < 10 ** digits else f"{v:.0f}"
    return str(v)


COLUMNS = (("node", "node"), ("best_bandwidth_mb_s", "best MB/s"),
           ("best_latency_us", "best lat us"), ("hpl_gflops", "HPL Gflops"),
           ("efficiency", "HPL eff"), ("stream_gb_s", "STREAM GB/s"),
           ("local_seq_mb_s", "fio seq MB/s"), ("local_rand_iops", "fio IOPS"),
           ("shared_seq_mb_s", "shared MB/s"), ("status", "status"))


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_heatmap(record: Mapping[str, Any], path: Path) -> Path | None:
    """Node x node ping-pong bandwidth (MB/s; blank: not measured)."""
    links = [lk for lk in record.get("links", []) if lk.get("bandwidth_mb_s") is not None]
    if not links:
        return None
    names = sorted({lk["a"] for lk in links} | {lk["b"] for lk in links})
    idx = {n: i for i, n in enumerate(names)}
    nan = float("nan")
    grid = [[nan] * len(names) for _ in names]
    for lk in links:
        i, j = idx[lk["a"]], idx[lk["b"]]
        grid[i][j] = grid[j][i] = float(lk["bandwidth_mb_s"])
    plt = _pyplot()
    size = max(3.5, 0.6 * len(names) + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    im = ax.imshow(grid, cmap="viridis")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_yticks(range(len(names)), names)
    if len(names) <= 16:
        for i in range(len(names)):
            for j in range(len(names)):
                if grid[i][j] == grid[i][j]:
                    ax.text(j, i, f"{grid[i][j]:.0f}", ha="center", va="center",
                            color="white", fontsize=8)
    fig.colorbar(im, ax=ax, label="ping-pong bandwidth (MB/s)")
    ax.set_title("MPI ping-pong bandwidth, node x node")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def plot_nodes(record: Mapping[str, Any], path: Path) -> Path | None:
    """Per-node bars: HPL Gflops and fio sequential MB/s (local), median dashed."""
    rows = node_rows(record)
    series = [(k, label) for k, label in (("hpl_gflops", "HPL (Gflops)"),
                                          ("local_seq_mb_s", "fio seq write, local (MB/s)"))
              if any(r[k] is not None for r in rows)]
    if not series:
        return None
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(series), figsize=(4.5 * len(series), 3.2), squeeze=False)
    for ax, (key, label) in zip(axes[0], series, strict=True):
        vals = [r[key] or 0.0 for r in rows]
        ax.bar([r["node"] for r in rows], vals, color="tab:blue")
        present = [r[key] for r in rows if r[key] is not None]
        if present:
            ax.axhline(statistics.median(present), color="k", ls="--", lw=1, label="median")
            ax.legend(fontsize=8)
        ax.set_title(label)
        ax.tick_params(axis="x", rotation=45)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def markdown(record: Mapping[str, Any], heatmap: str | None, bars: str | None) -> str:
    import time

    rows = node_rows(record)
    out = [f"# Cluster check {record['run_id']}", "",
           f"Started {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(record['started']))},"
           f" {record['ended'] - record['started']:.1f} s; checks: "
           f"{', '.join(record['plan'].get('checks', []))}"
           f"{' (quick)' if record['plan'].get('quick') else ''}; nodes: "
           f"{', '.join(record['plan'].get('nodes', []))}.", "", "## Verdicts", ""]
    verdicts = record.get("verdicts", [])
    out += [f"- {v['message']}" for v in verdicts] or ["- every node and link within limits"]
    out += ["", "## Nodes", "", "| " + " | ".join(h for _, h in COLUMNS) + " |",
            "|" + "---|" * len(COLUMNS)]
    for r in rows:
        cells = [fmt(r[k]) if k != "efficiency" or r[k] is None else f"{100 * r[k]:.0f}%"
                 for k, _ in COLUMNS]
        out.append("| " + " | ".join(cells) + " |")
    if heatmap:
        out += ["", "## Network", "", f"![ping-pong bandwidth heat map]({heatmap})"]
    if bars:
        out += ["", "## Compute and storage", "", f"![per-node HPL and fio]({bars})"]
    together = record.get("all_nodes")
    if together:
        solo = {r["node"]: r["shared_seq_mb_s"] for r in rows}
        eff = together.get("efficiency")
        out += ["", "## All nodes together", "",
                f"HPL on {together['nodes']} nodes ({together.get('ranks') or '-'} ranks): "
                f"{fmt(together.get('hpl_gflops'))} Gflops"
                f"{f', {100 * eff:.0f}% of the summed peak' if eff is not None else ''}.", ""]
        many = together.get("many_seq_mb_s") or {}
        if many:
            out += ["| node | fio seq write, all at once MB/s | alone MB/s | share |",
                    "|---|---|---|---|"]
            for n in sorted(many):
                alone = solo.get(n)
                share = f"{100 * many[n] / alone:.0f}%" if alone else "-"
                out.append(f"| {n} | {fmt(many[n])} | {fmt(alone)} | {share} |")
            out += ["", f"Aggregate: {fmt(sum(many.values()))} MB/s."]
    gpus = [(n["name"], n.get("gpus")) for n in record.get("nodes", [])
            if n.get("gpus") is not None]
    if gpus:
        out += ["", "## GPUs", "", "| node | GPUs (nvidia-smi) |", "|---|---|"]
        out += [f"| {n} | {', '.join(g) or 'none'} |" for n, g in gpus]
    links = record.get("links", [])
    if links:
        out += ["", "| link | latency us | bandwidth MB/s |", "|---|---|---|"]
        out += [f"| {lk['a']}~{lk['b']} | {fmt(lk['latency_us'])} | "
                f"{fmt(lk['bandwidth_mb_s'])} |" for lk in links]
    return "\n".join(out) + "\n"


def write_report(record: Mapping[str, Any], directory: Path) -> Path:
    """result.json, report.md and its pictures in ``directory``; the report's path."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "result.json").write_text(json.dumps(record, indent=1))
    heat = plot_heatmap(record, directory / "heatmap.png")
    bars = plot_nodes(record, directory / "nodes.png")
    md = directory / "report.md"
    md.write_text(markdown(record, heat.name if heat else None, bars.name if bars else None))
    return md


def history(reports_dir: Path) -> list[dict[str, Any]]:
    """Every kept run (result.json under ``reports_dir``), oldest first; unreadable ones
    skipped."""
    out = []
    for f in sorted(reports_dir.glob("*/result.json")):
        try:
            out.append(json.loads(f.read_text()))
        except (OSError, json.JSONDecodeError):
            continue
    out.sort(key=lambda r: r.get("started", 0))
    return out


def history_row(record: Mapping[str, Any]) -> dict[str, Any]:
    """One line of ``corral check history``: medians and the convicted subjects."""
    def med(vals: list[float]) -> float | None:
        return statistics.median(vals) if vals else None

    links = record.get("links", [])
    nodes = record.get("nodes", [])
    return {"run_id": record["run_id"], "started": record["started"],
            "nodes": len(record.get("plan", {}).get("nodes", [])),
            "median_bandwidth_mb_s": med([lk["bandwidth_mb_s"] for lk in links
                                          if lk.get("bandwidth_mb_s") is not None]),
            "median_latency_us": med([lk["latency_us"] for lk in links
                                      if lk.get("latency_us") is not None]),
            "median_hpl_gflops": med([n["hpl_gflops"] for n in nodes
                                      if n.get("hpl_gflops") is not None]),
            "outliers": sorted({str(v["subject"]) for v in record.get("verdicts", [])})}
