"""SWF reading and writing: header fields, comments, all 18 fields, gzip, errors."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from corral.sim.swf import (
    COL,
    FIELDS,
    SwfError,
    SwfHeader,
    read_swf,
    trace_from_columns,
    write_swf,
)

SMALL = """; Version: 2.2
; Computer: Test machine
; MaxNodes: 338 (batch partition; 512 total)
; MaxProcs: 338
; Queue:  0  interactive
; Queue:  1  batch
; Note: a note that
;       continues here
    1        0     10    100    4  90.50    -1    4    120    -1  1   3   2  -1  1 -1 -1 -1
    2        5     -1     -1    8     -1    -1    8     -1    -1  5   4   2  -1  1 -1 -1 -1
; a comment between jobs
    3       30      0   2.5     1     -1    -1    1     60    -1  1   3   2  -1  0 -1 -1 -1

"""


def _write(tmp_path: Path, text: str, name: str = "t.swf") -> Path:
    p = tmp_path / name
    if name.endswith(".gz"):
        with gzip.open(p, "wt") as f:
            f.write(text)
    else:
        p.write_text(text)
    return p


def test_reads_header_fields_and_all_18_job_fields(tmp_path: Path) -> None:
    t = read_swf(_write(tmp_path, SMALL))
    assert len(t) == 3
    assert t.data.shape == (3, 18) and len(FIELDS) == 18
    assert t.max_nodes == 338 and t.max_procs == 338  # leading integer of the value
    assert t.header.fields["Computer"] == "Test machine"
    assert t.header.multi["Queue"] == ("0  interactive", "1  batch")
    assert any("a comment between jobs" in ln for ln in t.header.lines)
    assert t.column("cpu_avg_s")[0] == 90.5  # fractional fields kept
    assert t.column("run_s")[2] == 2.5
    assert t.column("run_s")[1] == -1  # unknown stays -1
    assert list(t.column("job_id")) == [1, 2, 3]
    assert t.column("think_s")[0] == -1


def test_max_procs_defaults_to_max_nodes(tmp_path: Path) -> None:
    text = "; MaxNodes: 256\n1 0 -1 10 1 -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1\n"
    t = read_swf(_write(tmp_path, text))
    assert t.header.max_procs is None and t.max_procs == 256


def test_gzip_roundtrip_keeps_header_and_values(tmp_path: Path) -> None:
    t = read_swf(_write(tmp_path, SMALL, "in.swf.gz"))
    out = tmp_path / "out.swf.gz"
    write_swf(out, t)
    back = read_swf(out)
    assert back.header.lines == t.header.lines
    np.testing.assert_array_equal(back.data, t.data)
    with gzip.open(out, "rt") as f:
        body = [ln for ln in f if not ln.startswith(";")]
    assert body[0].split()[5] == "90.50" and body[0].split()[0] == "1"


def test_plain_write_is_readable_by_line(tmp_path: Path) -> None:
    t = read_swf(_write(tmp_path, SMALL))
    out = tmp_path / "out.swf"
    write_swf(out, t)
    lines = [ln for ln in out.read_text().splitlines() if not ln.startswith(";")]
    assert lines[2].split()[:4] == ["3", "30", "0", "2.50"]


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        ("1 0 1 2 3", "expected 18 fields, found 5"),
        ("1 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 x", "field 18 (think_s) is not a number"),
    ],
)
def test_bad_job_line_names_file_and_line(tmp_path: Path, line: str, expect: str) -> None:
    text = "; MaxNodes: 4\n1 0 -1 10 1 -1 -1 -1 -1 -1 1 -1 -1 -1 0 -1 -1 -1\n" + line + "\n"
    p = _write(tmp_path, text)
    with pytest.raises(SwfError) as exc:
        read_swf(p)
    assert f"{p}:3:" in str(exc.value) and expect in str(exc.value)


def test_missing_file_and_bad_gzip(tmp_path: Path) -> None:
    with pytest.raises(SwfError, match="no such trace file"):
        read_swf(tmp_path / "nope.swf")
    bad = tmp_path / "bad.swf.gz"
    bad.write_bytes(b"not gzip at all")
    with pytest.raises(SwfError, match="cannot read"):
        read_swf(bad)


def test_empty_trace(tmp_path: Path) -> None:
    t = read_swf(_write(tmp_path, "; MaxNodes: 4\n"))
    assert len(t) == 0 and t.data.shape == (0, 18)


def test_trace_from_columns_fills_unknown_with_minus_one(tmp_path: Path) -> None:
    h = SwfHeader.build([("MaxNodes", 2), ("MaxProcs", 8)], ["exported by a test"])
    t = trace_from_columns(h, {"job_id": [1, 2], "submit_s": [0, 5], "run_s": [3, 4]}, 2)
    assert t.data[1, COL["run_s"]] == 4 and t.data[1, COL["user_id"]] == -1
    p = tmp_path / "x.swf"
    write_swf(p, t)
    assert read_swf(p).max_procs == 8
    with pytest.raises(KeyError):
        trace_from_columns(h, {"nope": [1]}, 1)


def test_every_shared_trace_parses(traces_dir: Path) -> None:
    """All 12 files: 18 numeric fields per line and a usable machine size (header only
    checks here; the full replays are in test_traces.py)."""
    expected = {
        "SDSC-SP2-1998-4.2-cln.swf.gz": 59715, "HPC2N-2002-2.2-cln.swf.gz": 202871,
        "KTH-SP2-1996-2.1-cln.swf.gz": 28476, "lublin_256.swf": 10000,
    }
    for name, count in expected.items():
        t = read_swf(traces_dir / name)
        assert len(t) == count
        assert t.max_nodes is not None and t.max_procs is not None
