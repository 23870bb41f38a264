"""``[cgroup] max_output_mb`` (issue 11, item 6): a job whose output file outgrows the
limit is killed and ends FAILED with the reason, its output file saying why; a job
within the limit is untouched."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import TEST_CONFIG, Cluster


@pytest.fixture(scope="module")
def capped() -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="corral-outcap-"))
    c = Cluster(root, TEST_CONFIG + "\n[cgroup]\nmax_output_mb = 1\n")
    c.up()
    try:
        yield c
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


def test_output_past_the_limit_fails_the_job(capped: Cluster) -> None:
    out = capped.work / "flood.out"
    # 64 KiB a step, forever: only the limit ends it
    jid = capped.submit("while :; do head -c 65536 /dev/zero | tr '\\0' x; sleep 0.01; done",
                        stdout=str(out))
    rec = capped.wait_done(jid, timeout=60)
    assert rec["state"] == "FAILED", rec
    assert "output limit of 1 MB exceeded" in rec["end_reason"], rec
    data = out.read_bytes()  # the message, then what the job wrote before SIGTERM took it
    assert b"DUE TO OUTPUT LIMIT" in data, data[-300:]
    assert out.stat().st_size < 8 * 1024 * 1024  # stopped within a second or so


def test_output_within_the_limit_is_fine(capped: Cluster) -> None:
    out = capped.work / "small.out"
    jid = capped.submit("head -c 500000 /dev/zero | tr '\\0' y; echo; echo done",
                        stdout=str(out))
    rec = capped.wait_done(jid)
    assert rec["state"] == "COMPLETED", rec
    assert out.read_text().endswith("done\n")
