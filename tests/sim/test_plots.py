"""Plots are written as real image files (PNG and SVG)."""

from __future__ import annotations

from pathlib import Path

from corral.sim.plots import plot_gantt, plot_timeseries, plot_wait_cdf

from .test_metrics import make_result


def test_png_and_svg(tmp_path: Path) -> None:
    res = make_result()
    plot_timeseries([res, res], tmp_path / "ts.png")
    plot_wait_cdf([res], tmp_path / "cdf.svg")
    plot_gantt(res, tmp_path / "g.png", (0.0, 200.0))
    res.allocations = {0: (0, 1), 1: (2,), 2: (0, 1, 2, 3)}
    plot_gantt(res, tmp_path / "g2.png", (0.0, 200.0))
    for name in ("ts.png", "g.png", "g2.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (tmp_path / "cdf.svg").read_bytes()[:400]
