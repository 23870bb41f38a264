"""Joining a node is one command: ``corral token --agent`` prints it; run as printed
(adapted to a fresh agent state dir and a node name of its own), a second node registers
over TCP, with its address and host name recorded and shown (corral nodes, scontrol,
sinfo)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import ENTRY, TEST_CONFIG, Cluster, corral, wait_for

TCP_CONFIG = TEST_CONFIG.replace("[controller]\n", '[controller]\nlisten = "127.0.0.1:0"\n', 1)


@pytest.fixture()
def tcp_cluster() -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="corral-e2e-"))
    c = Cluster(root, TCP_CONFIG)
    c.up()
    try:
        yield c
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


def _shim(c: Cluster, cmd: str, *args: str) -> str:
    env = dict(os.environ, CORRAL_STATE_DIR=str(c.state_dir))
    r = subprocess.run([sys.executable, "-c", f"from corral.shims.lean import main; "
                        f"main({cmd!r})", *args], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_token_agent_line_joins_a_node(tcp_cluster: Cluster) -> None:
    c = tcp_cluster
    r = corral("token", "--agent", "--state-dir", str(c.state_dir))
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip("\n")
    assert line.startswith(" CORRAL_CLUSTER_KEY=")  # the space: not in bash's history
    key = (c.state_dir / "cluster.key").read_text().strip()
    url = json.loads((c.state_dir / "controller.json").read_text())["url"]
    assert url.startswith("http://127.0.0.1:")
    words = shlex.split(line)
    assert words == [f"CORRAL_CLUSTER_KEY={key}", "corral", "agent", "--controller", url]
    assert key not in words[1:]  # the secret is in no argument (ps shows arguments)

    # run it as printed: the env assignment, then `corral agent ...`
    var, value = words[0].split("=", 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env[var] = value
    log = open(c.root / "joined.log", "ab")
    p = subprocess.Popen([sys.executable, "-c", ENTRY, *words[2:], "--state-dir",
                          str(c.root / "joined-agent"), "--name", "joined"],
                         env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    c.extra_procs.append(p)
    node = wait_for(lambda: next((n for n in c.client.nodes()
                                  if n["name"] == "joined" and n["connected"]), None), 30,
                    what="the joined node to register")
    assert node["state"] == "IDLE"
    assert node["address"] == "127.0.0.1"  # the peer of its TCP connection
    assert node["hostname"] == os.uname().nodename
    assert node["cpus"] > 0 and node["mem_mb"] > 0 and node["sockets"] >= 1
    local = next(n for n in c.client.nodes() if n["name"] == "testnode")
    assert local["address"] == "" and local["hostname"] == os.uname().nodename  # unix socket

    # corral nodes (table and --json), scontrol show node, sinfo %o/%n
    env_sd = dict(os.environ, CORRAL_STATE_DIR=str(c.state_dir))
    r = corral("nodes", "--json", env=env_sd)
    assert r.returncode == 0, r.stderr
    joined = next(n for n in json.loads(r.stdout)["nodes"] if n["name"] == "joined")
    assert joined["address"] == "127.0.0.1"
    r = corral("nodes", env=env_sd)
    assert r.returncode == 0 and "127.0.0.1" in r.stdout and "S:C:T" in r.stdout, r.stdout
    out = _shim(c, "scontrol", "show", "node", "joined")
    assert f"NodeAddr=127.0.0.1 NodeHostName={os.uname().nodename} " in out, out
    assert f"Sockets={node['sockets']} " in out and f"RealMemory={node['mem_mb']} " in out
    out = _shim(c, "sinfo", "-N", "-n", "joined", "-h", "-o", "%N %o %n")
    assert out.split() == ["joined", "127.0.0.1", os.uname().nodename], out


def test_token_agent_without_tcp_listen_says_so(tmp_path: Path) -> None:
    c = Cluster(tmp_path)
    c.up()
    try:
        r = corral("token", "--agent", "--state-dir", str(c.state_dir))
        assert r.returncode == 1 and "--listen" in r.stderr, r.stderr
        r = corral("token", "--agent", "--state-dir", str(c.state_dir), "--url",
                   "http://head:6817")
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip().endswith("corral agent --controller http://head:6817")
    finally:
        c.down()
