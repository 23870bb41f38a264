"""Per-job limits and credential limits on a real cluster (issue 11, item 6): the token
lifetime cap, the default pids limit of every job, Slurm's memory-constraint knobs."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.agent.cgroups import detect_layout
from corral.client import CorralError
from tests.e2e.cluster import TEST_CONFIG, Cluster

MAX_TTL = 3600
MAX_PIDS = 20
CONFIG = TEST_CONFIG.replace(
    "[controller]\n", f"[controller]\nmax_token_ttl_s = {MAX_TTL}\n", 1) + f"""
[cgroup]
max_pids_per_job = {MAX_PIDS}
"""

FORKS = (f"#!{sys.executable}\n"  # the real interpreter (a pyenv shim would fork itself)
         "import subprocess, sys\nps, errs = [], []\n"
         "for i in range(int(sys.argv[1])):\n"
         "    try:\n        ps.append(subprocess.Popen(['sleep', '30']))\n"
         "    except OSError as exc:\n        errs.append(exc.errno)\n"
         "for p in ps:\n    p.kill()\n    p.wait()\n"
         "print('started=%d refused=%d errnos=%s' % (len(ps), len(errs), sorted(set(errs))))\n")


def needs_cgroups() -> None:
    if os.geteuid() != 0 or detect_layout().mode == "none":
        pytest.skip("needs root and a cgroup filesystem (the agent enforces limits there)")


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="corral-e2e-"))
    c = Cluster(root, CONFIG)
    c.up()
    try:
        yield c
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("ttl", [1e308, -5, 0, 1.5, "3600", True, MAX_TTL + 1, 10**30])
def test_token_lifetime_is_validated_and_capped(cluster: Cluster, ttl: object) -> None:
    with pytest.raises(CorralError) as err:
        cluster.client.request("POST", "/tokens", {"ttl_s": ttl})
    assert err.value.status == 400, err.value
    assert "ttl_s" in err.value.message


def test_token_within_the_cap_is_minted(cluster: Cluster) -> None:
    got = cluster.client.request("POST", "/tokens", {"ttl_s": MAX_TTL})
    assert got["ttl_s"] == MAX_TTL and got["token"]
    assert cluster.client.request("POST", "/tokens", {})["ttl_s"] == MAX_TTL  # default capped


def test_default_pids_limit_stops_a_fork_bomb(cluster: Cluster) -> None:
    needs_cgroups()
    (cluster.work / "forks.py").write_text(FORKS)
    bomb = cluster.submit(f"{sys.executable} {cluster.work}/forks.py 40 >bomb.out 2>&1")
    normal = cluster.submit(f"{sys.executable} {cluster.work}/forks.py 10 >normal.out 2>&1")
    for jid in (bomb, normal):
        assert cluster.wait_done(jid)["state"] == "COMPLETED"
    # the job's shell (sh -c), python, and 18 children fill the limit of 20; the rest of
    # the forks fail with EAGAIN (11) and the job goes on
    bomb_out = (cluster.work / "bomb.out").read_text()
    assert f"started={MAX_PIDS - 2} refused={40 - MAX_PIDS + 2} errnos=[11]" in bomb_out, bomb_out
    normal_out = (cluster.work / "normal.out").read_text()
    assert "started=10 refused=0" in normal_out, normal_out


def test_tiny_mem_request_gets_slurms_floor(cluster: Cluster) -> None:
    needs_cgroups()
    script = f"{sys.executable} -c \"b = b'x' * (8 << 20); print('ran')\" >mem5.out 2>&1"
    jid = cluster.submit(script, mem_per_node_mb=5)  # sbatch --mem=5
    job = cluster.wait_done(jid)
    assert job["state"] == "COMPLETED", (job, (cluster.work / "mem5.out").read_text())
    assert "ran" in (cluster.work / "mem5.out").read_text()
