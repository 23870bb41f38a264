"""Readers of hpcc, ping-pong and fio output (real outputs of Debian's hpcc 1.5 and
fio 3.33, kept beside this file), the CPU probe and the theoretical peak."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.checks.parse import (
    flops_per_cycle,
    parse_fio,
    parse_hpcc,
    parse_pingpong,
    parse_probe,
    peak_gflops,
)
from corral.checks.runner import grid

HERE = Path(__file__).parent


def test_hpcc_summary_section() -> None:
    s = parse_hpcc((HERE / "hpccoutf_sample.txt").read_text())
    assert s["HPL_N"] == 400 and s["CommWorldProcs"] == 1
    assert s["HPL_Tflops"] > 0 and s["StarSTREAM_Triad"] > 0


def test_hpcc_without_summary_is_refused() -> None:
    with pytest.raises(ValueError, match="Summary section"):
        parse_hpcc("HPL run was interrupted\n")
    with pytest.raises(ValueError, match="HPL_Tflops"):
        parse_hpcc("Begin of Summary section.\nStarSTREAM_Triad=3\nEnd of Summary section.\n")


def test_pingpong_line() -> None:
    pp = parse_pingpong("noise\npingpong latency_us=1.5 bandwidth_mb_s=9000.25 bytes=1048576 "
                        "reps=30,12 host0=a host1=b\n")
    assert pp["latency_us"] == 1.5 and pp["bandwidth_mb_s"] == 9000.25
    with pytest.raises(ValueError, match="no 'pingpong"):
        parse_pingpong("srun: error: connection refused\n")
    with pytest.raises(ValueError, match="lacks bandwidth_mb_s"):
        parse_pingpong("pingpong latency_us=3\n")


def test_fio_json() -> None:
    res = parse_fio((HERE / "fio_sample.json").read_text())
    assert set(res) == {"seq", "rand"}
    assert res["seq"]["bw_mb_s"] > 0 and res["rand"]["iops"] > 0
    with pytest.raises(ValueError, match="no JSON"):
        parse_fio("fio: pid=1, err=28/file:filesetup.c: No space left on device")


def test_probe_and_peak() -> None:
    probe = parse_probe("cpus=8\nmax_khz=3000000\nmodel name\t: Xeon\ncpu MHz\t\t: 1200.0\n"
                        "flags\t\t: fpu sse2 avx avx2 fma avx512f\nranks=8\n")
    assert probe.cpus == 8 and probe.mhz == 3000 and probe.model == "Xeon"
    assert peak_gflops(8, probe.mhz, probe.flags) == 8 * 3.0 * 32
    no_freq = parse_probe("cpus=2\nmax_khz=\ncpu MHz : 2000.5\nflags : sse2 avx2 fma\n")
    assert no_freq.mhz == 2000.5 and flops_per_cycle(no_freq.flags) == 16
    assert peak_gflops(2, None, ["avx"]) is None
    assert flops_per_cycle(["avx"]) == 8 and flops_per_cycle(["sse2"]) == 4
    with pytest.raises(ValueError, match="cpus=N"):
        parse_probe("flags : sse2\n")


def test_hpl_grid_is_the_most_square() -> None:
    assert grid(1) == (1, 1) and grid(4) == (2, 2) and grid(6) == (2, 3)
    assert grid(7) == (1, 7) and grid(12) == (3, 4)
