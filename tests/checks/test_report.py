"""The run record, its Markdown report with pictures, the history, and the CLI's edge
(bad ``--checks``, an empty history) without a cluster."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from corral.checks.report import history, history_row, node_rows, run_record, write_report
from corral.checks.verdict import Limits, LinkResult, NodeResult, verdicts
from corral.cli.main import build_app


def record(run_id: str = "r1", started: float = 100.0) -> dict[str, object]:
    links = [LinkResult("a", "b", 2.0, 1000.0), LinkResult("a", "c", 2.0, 10.0),
             LinkResult("b", "c", 2.5, 11.0)]
    nodes = [NodeResult("a", 100.0, 20.0, 200.0, {"local_seq_mb_s": 500.0}),
             NodeResult("b", 90.0, 20.0, None, {"local_seq_mb_s": 480.0}),
             NodeResult("c", 30.0, 19.0, 200.0, {"local_seq_mb_s": 510.0})]
    return run_record(run_id, started, started + 5, nodes, links,
                      verdicts(nodes, links, Limits()), {"nodes": ["a", "b", "c"],
                                                         "checks": ["network", "compute"],
                                                         "quick": True})


def test_rows_and_report(tmp_path: Path) -> None:
    rec = record()
    rows = {r["node"]: r for r in node_rows(rec)}
    assert rows["c"]["status"] == "compute,network" and rows["a"]["status"] == "ok"
    assert rows["a"]["best_bandwidth_mb_s"] == 1000.0 and rows["a"]["efficiency"] == 0.5
    md = write_report(rec, tmp_path / "r1")
    text = md.read_text()
    assert "c: ping-pong bandwidth to every peer at most 1% of the median" in text
    assert "![ping-pong bandwidth heat map](heatmap.png)" in text and "| a~c | 2 | 10 |" in text
    assert (tmp_path / "r1" / "heatmap.png").read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "r1" / "nodes.png").exists()
    assert json.loads((tmp_path / "r1" / "result.json").read_text())["ok"] is False


def test_history_oldest_first(tmp_path: Path) -> None:
    write_report(record("late", 200.0), tmp_path / "late")
    write_report(record("early", 100.0), tmp_path / "early")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "result.json").write_text("{")
    runs = history(tmp_path)
    assert [r["run_id"] for r in runs] == ["early", "late"]
    row = history_row(runs[0])
    assert row["outliers"] == ["c"] and row["median_bandwidth_mb_s"] == 11.0
    assert row["median_hpl_gflops"] == 90.0


def test_cli_edges(tmp_path: Path) -> None:
    runner = CliRunner()
    app = build_app()
    env = {"CORRAL_STATE_DIR": str(tmp_path), "CORRAL_SOCKET": "", "CORRAL_URL": ""}
    res = runner.invoke(app, ["check", "cluster", "--checks", "network,disk"], env=env)
    assert res.exit_code == 1
    assert "--checks: unknown disk; choose from network, compute, storage, gpu" in res.output
    bad = tmp_path / "bad.toml"
    bad.write_text("[checks]\nmin_relativ = 0.5\n")
    res = runner.invoke(app, ["check", "cluster", "--config", str(bad)], env=env)
    assert res.exit_code == 1
    assert "checks.min_relativ: unknown key; did you mean 'min_relative'?" in res.output
    res = runner.invoke(app, ["check", "history", "--json"], env=env)
    assert res.exit_code == 0 and json.loads(res.stdout) == {"runs": []}
    write_report(record(), tmp_path / "checks" / "reports" / "r1")
    res = runner.invoke(app, ["check", "history"], env=env)
    assert res.exit_code == 0 and "r1" in res.stdout and "c" in res.stdout
