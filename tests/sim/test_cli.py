"""``corral sim`` end to end: commands, outputs, plots and error messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.main import app, build_app
from corral.sim.swf import read_swf

from .conftest import TRACES

runner = CliRunner(env={"COLUMNS": "220"})
KTH = str(TRACES / "KTH-SP2-1996-2.1-cln.swf.gz")


@pytest.fixture(scope="module", autouse=True)
def _app() -> None:
    build_app()


def test_compare_prints_table_and_writes_plots(tmp_path: Path) -> None:
    r = runner.invoke(app, [
        "sim", "compare", KTH, "--jobs", "1000:1250", "--policies",
        "fcfs+strict,fcfs+easy,sjf+easy", "--plot", str(tmp_path / "plots"),
        "--json", str(tmp_path / "c.json"), "--csv", str(tmp_path / "c.csv"), "--quiet",
    ])
    assert r.exit_code == 0, r.output
    for word in ("fcfs+strict", "fcfs+easy", "sjf+easy", "wait", "bsld", "Jain"):
        assert word in r.output
    data = json.loads((tmp_path / "c.json").read_text())
    assert [d["label"] for d in data] == ["fcfs+strict", "fcfs+easy", "sjf+easy"]
    for f in ("timeseries.png", "wait_cdf.png", "gantt_1.png", "gantt_3.png"):
        assert (tmp_path / "plots" / f).stat().st_size > 1000
    assert len((tmp_path / "c.csv").read_text().splitlines()) == 4


def test_run_writes_json_csv_and_swf(tmp_path: Path) -> None:
    r = runner.invoke(app, [
        "sim", "run", KTH, "--jobs", "300", "--policy", "fcfs+easy",
        "--json", str(tmp_path / "m.json"), "--csv", str(tmp_path / "jobs.csv"),
        "--swf", str(tmp_path / "out.swf.gz"), "--quiet",
    ])
    assert r.exit_code == 0, r.output
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["jobs"]["total"] == 300 and m["jobs"]["started"] == 300
    assert len((tmp_path / "jobs.csv").read_text().splitlines()) == 301
    back = read_swf(tmp_path / "out.swf.gz")
    assert len(back) == 300 and back.max_nodes == 100
    assert (back.column("wait_s") >= 0).all()


def test_sampled_sequences_are_averaged(tmp_path: Path) -> None:
    r = runner.invoke(app, [
        "sim", "run", KTH, "--sample", "3x200", "--seed", "5", "--policy", "sjf+easy",
        "--json", str(tmp_path / "m.json"), "--quiet",
    ])
    assert r.exit_code == 0, r.output
    m = json.loads((tmp_path / "m.json").read_text())
    assert m["sequences"] == 3 and len(m["per_sequence"]) == 3
    assert m["jobs"]["total"] == 600


def test_errors_are_precise(tmp_path: Path) -> None:
    r = runner.invoke(app, ["sim", "run", str(tmp_path / "missing.swf")])
    assert r.exit_code == 2 and "no such trace file" in r.output
    r = runner.invoke(app, ["sim", "run", KTH, "--policy", "fifo"])
    assert r.exit_code == 2 and "unknown policy word 'fifo'" in r.output
    r = runner.invoke(app, ["sim", "run", KTH, "--jobs", "1-2"])
    assert r.exit_code == 2 and "job selection" in r.output
    bad = tmp_path / "bad.swf"
    bad.write_text("; MaxNodes: 4\n1 2 3\n")
    r = runner.invoke(app, ["sim", "run", str(bad)])
    assert r.exit_code == 2 and "bad.swf:2: expected 18 fields, found 3" in r.output


def test_convert_and_info(tmp_path: Path) -> None:
    out = tmp_path / "kth-100.swf"
    r = runner.invoke(app, ["sim", "convert", KTH, str(out), "--jobs", "100"])
    assert r.exit_code == 0, r.output
    t = read_swf(out)
    assert len(t) == 100 and t.header.fields["Computer"].startswith("IBM SP2")
    r = runner.invoke(app, ["sim", "info", str(out)])
    assert r.exit_code == 0 and "100 / 100" in r.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--unknown-runtime", "soon"], "--unknown-runtime 'soon': use drop or seconds"),
        (["--default-estimate", "1 hour", "--missing-estimate", "default"],
         "--default-estimate '1 hour'"),
        (["--exceed", "maybe"], "'maybe' is not a valid ExceedPolicy"),
        (["--machine", "cloud"], "--machine 'cloud': use auto, cores, nodes or pool"),
        (["--sample", "3"], "sample '3' not understood"),
    ],
)
def test_bad_options_are_named(args: list[str], message: str) -> None:
    r = runner.invoke(app, ["sim", "run", KTH, "--jobs", "50", "--quiet", *args])
    assert r.exit_code == 2, r.output
    assert message in r.output
