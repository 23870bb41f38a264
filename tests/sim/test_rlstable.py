"""``corral sim rlscheduler``: the whole table's shape, cells computed by hand on a small
trace, and the HPC2N and Lublin-2 rows against the published means."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.main import app, build_app
from corral.sim import baselines as bl
from corral.sim.rlstable import TableSpec, load_traces, run_table

runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def _app() -> None:
    build_app()


def _hand_trace(directory: Path) -> Path:
    """12 identical jobs on a 2-node machine: 2 nodes, 100 s, one every 50 s.

    Any 3 consecutive jobs, on an empty machine, under any order: the first starts at
    once, the second waits 50 s, the third 100 s. Bounded slowdown (1 + 1.5 + 2) / 3 =
    1.5; the authors' utilization 3 * 100 * 2 / ((200 - 0) * 2) = 1.5 (their span ends at
    the last start, not the last end, so it can exceed 1).
    """
    lines = ["; MaxNodes: 2", "; MaxProcs: 2"]
    for k in range(12):
        lines.append(f"{k + 1} {k * 50} 0 100 2 -1 -1 2 100 -1 1 1 1 -1 1 -1 -1 -1")
    p = directory / "lublin_256.swf"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_cells_by_hand(tmp_path: Path) -> None:
    _hand_trace(tmp_path)
    wls = load_traces(tmp_path, ["Lublin-1"])
    spec = TableSpec(traces=("Lublin-1",), count=2, length=3)
    rows = run_table(wls, spec)
    assert [(r["mode"], r["policy"]) for r in rows] == [
        (m, p) for m in ("no backfilling", "backfilling") for p in bl.HEURISTICS]
    for r in rows:
        assert r["published"] is None  # not the paper's sampling: nothing to compare with
        assert len(r["starts"]) == 2 and all(3 <= s < 12 - 3 - 1 for s in r["starts"])
        for route in ("compat", "core"):
            cell = r[route]
            assert cell["per_sequence"]["bsld"] == pytest.approx([1.5, 1.5])
            assert cell["per_sequence"]["utilization"] == pytest.approx([1.5, 1.5])
            assert cell["per_sequence"]["wait_s"] == pytest.approx([50.0, 50.0])
            assert cell["bsld"] == pytest.approx(1.5)


def test_cli_json_carries_every_cell(tmp_path: Path) -> None:
    _hand_trace(tmp_path)
    out = tmp_path / "t.json"
    r = runner.invoke(app, ["sim", "rlscheduler", "--traces", str(tmp_path), "--only",
                            "Lublin-1", "--sequences", "2", "--length", "3", "--no-core",
                            "--per-sequence", "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert "sequence 2" in r.output and "1.500" in r.output
    data = json.loads(out.read_text())
    assert data["sequences"] == 2 and data["length"] == 3 and len(data["cells"]) == 10
    assert all(c["core"] is None for c in data["cells"])
    r = runner.invoke(app, ["sim", "rlscheduler", "--traces", str(tmp_path), "--only",
                            "Lublin-9"])
    assert r.exit_code == 2 and "unknown trace 'Lublin-9'" in r.output
    r = runner.invoke(app, ["sim", "rlscheduler", "--traces", str(tmp_path), "--only",
                            "HPC2N"])
    assert r.exit_code == 2 and "HPC2N-2002-2.2-cln.swf.gz" in r.output


@pytest.mark.parametrize("trace", ["HPC2N", "Lublin-2"])
def test_the_other_two_traces_reproduce_the_published_means(traces_dir: Path,
                                                            trace: str) -> None:
    wl = load_traces(traces_dir, [trace])[trace]
    starts = bl.paper_starts(wl, trace)
    assert starts == list(bl.PUBLISHED_STARTS)
    for backfill in (False, True):
        for pol in bl.HEURISTICS:
            cells = bl.compat_cells(wl, pol, backfill=backfill, starts=starts)
            bsld, util = bl.PUBLISHED[(trace, backfill)][pol]
            assert round(cells.mean_bsld, 2) == pytest.approx(bsld, abs=0.006)
            assert round(cells.mean_utilization, 3) == pytest.approx(util, abs=0.0006)
