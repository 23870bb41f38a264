"""The per-user rate limit on a real controller, with two real users: one user's loop is
refused (429, Slurm's wording) past its bucket while the other's requests all pass; the
launcher and the Python client wait and retry instead of failing; root is not limited."""

from __future__ import annotations

import json
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import TEST_CONFIG, Cluster
from tests.e2e.conftest import USER

pytestmark = pytest.mark.root

LIMITS = "\n[rate_limit]\nbucket_size = 20\nrefill_rate = 10\nrefill_period_s = 1.0\n"

HAMMER = r"""
import json, sys, time
from corral.client import Client, CorralError
c = Client(socket_path=sys.argv[1])
mode, n, pause = sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
codes, slurm, t0 = [], "", time.monotonic()
for _ in range(n):
    try:
        if mode == "call":
            c.call("GET", "/whoami")
        else:
            c.request("GET", "/whoami")
        codes.append(200)
    except CorralError as exc:
        codes.append(exc.status)
        slurm = exc.slurm or slurm
    time.sleep(pause)
print(json.dumps({"codes": codes, "slurm": slurm, "took": time.monotonic() - t0}))
"""


@pytest.fixture(scope="module")
def limited_cluster(test_user: pwd.struct_passwd) -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="corral-rl-"))
    c = Cluster(root, TEST_CONFIG + LIMITS)
    c.up()
    try:
        yield c
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


def _spawn(user: str, args: list[str], code: str = HAMMER) -> subprocess.Popen[str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": src, "HOME": "/tmp"}
    pw = pwd.getpwnam(user)
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    return subprocess.Popen([python, "-c", code, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, user=pw.pw_uid,
                            group=pw.pw_gid, extra_groups=[], cwd="/tmp")


def _metrics(c: Cluster) -> str:
    import http.client
    import socket

    class UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(str(c.sock))

    conn = UnixConnection("localhost")
    conn.request("GET", "/metrics")
    body = conn.getresponse().read().decode()
    conn.close()
    return body


def _result(p: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_fair_between_two_users(limited_cluster: Cluster) -> None:
    c = limited_cluster
    sock = str(c.sock)
    # nobody hammers (no waiting: each refusal is seen); corraltest polls 4 times a second
    hog = _spawn("nobody", [sock, "call", "300", "0"])
    polite = _spawn(USER, [sock, "call", "12", "0.25"])
    h, p = _result(hog), _result(polite)
    assert p["codes"] == [200] * 12, p  # the other user is never slowed down
    ok = h["codes"].count(200)
    assert h["codes"].count(429) >= 100, h
    # its burst of 20, then 10 a second for as long as it ran (one period of slack)
    assert 20 <= ok <= 20 + 10 * (h["took"] + 1), (ok, h["took"])
    assert h["slurm"] == "Rate limit exceeded, please retry momentarily"
    # root is not limited
    for _ in range(60):
        c.client.call("GET", "/whoami")
    # Prometheus sees the refusals (and root's 60 calls are not counted as checked)
    text = _metrics(c)
    values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
              if line.startswith("corral_rate_")}
    assert values["corral_rate_limited_requests"] >= h["codes"].count(429), values
    assert values["corral_rate_checked_requests"] >= ok + 12, values
    assert values["corral_rate_limit_users"] >= 2, values


def test_clients_wait_out_the_limit(limited_cluster: Cluster) -> None:
    c = limited_cluster
    sock = str(c.sock)
    # Client.request waits and retries: 45 requests all succeed, taking >= (45-20)/10 s
    got = _result(_spawn(USER, [sock, "request", "45", "0"]))
    assert got["codes"] == [200] * 45, got
    assert got["took"] >= 1.5, got
    # the launcher (lean.py) waits too: squeue succeeds while the bucket is empty
    drain = _result(_spawn(USER, [sock, "call", "40", "0"]))
    assert 429 in drain["codes"]
    code = ("import sys\nfrom corral.shims.lean import main\n"
            "main('squeue', ['-h', '-o', '%i'])\n")
    env_code = f"import os\nos.environ['CORRAL_SOCKET'] = {sock!r}\n" + code
    t0 = time.monotonic()
    sq = _spawn(USER, [], env_code)
    out, err = sq.communicate(timeout=60)
    assert sq.returncode == 0, (out, err)
    assert "Rate limit" not in err and time.monotonic() - t0 < 30
