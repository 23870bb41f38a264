"""Node liveness with real processes: an agent that is connected but silent (SIGSTOP, a
hang, a cut link whose TCP connection stays open) loses its node like a disconnected one,
and an agent whose controller stopped answering reconnects instead of waiting forever."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import ENTRY, TEST_CONFIG, Cluster, _alive, wait_for

DOWN_AFTER = 3.0  # node_down_after_s of TEST_CONFIG
GRACE_CONFIG = TEST_CONFIG.replace("node_fail_grace_s = 60", "node_fail_grace_s = 1")
TCP_CONFIG = TEST_CONFIG.replace("[controller]\n", '[controller]\nlisten = "127.0.0.1:0"\n', 1)


def _cluster(config: str) -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="corral-e2e-"))
    c = Cluster(root, config)
    c.up()
    try:
        yield c
    finally:
        pid = c.agent_pid()
        if pid:  # a stopped agent would not stop on SIGTERM
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        c.down()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture()
def grace_cluster() -> Iterator[Cluster]:
    yield from _cluster(GRACE_CONFIG)


@pytest.fixture()
def long_grace_cluster() -> Iterator[Cluster]:
    yield from _cluster(TEST_CONFIG)


@pytest.fixture()
def tcp_cluster() -> Iterator[Cluster]:
    yield from _cluster(TCP_CONFIG)


def _node(c: Cluster, name: str = "testnode") -> dict[str, Any]:
    return next(n for n in c.client.nodes() if n["name"] == name)


def _gate_cmd(gate: Path) -> str:
    return (f"echo $$ > pid.$SLURM_JOB_ID.$SLURM_RESTART_COUNT; "
            f"while [ ! -e {gate} ]; do sleep 0.05; done")


def _wait_pid_file(c: Cluster, jid: int, run: int = 0) -> int:
    f = c.work / f"pid.{jid}.{run}"
    wait_for(lambda: f.exists() and f.read_text().strip(), 10, what=f"job {jid}'s pid")
    return int(f.read_text())


def test_stopped_agent_node_down_then_jobs_requeued_or_node_fail(
        grace_cluster: Cluster) -> None:
    c = grace_cluster
    gate = c.work / "gate"
    keep = c.submit(_gate_cmd(gate), requeue=True)
    lose = c.submit(_gate_cmd(gate), requeue=False)
    for jid in (keep, lose):
        c.wait_state(jid, "RUNNING")
        _wait_pid_file(c, jid)
    apid = c.agent_pid()
    assert apid is not None
    os.kill(apid, signal.SIGSTOP)
    stopped = time.monotonic()
    # the TCP (here: Unix) connection stays open: only the missing frames tell
    wait_for(lambda: _node(c)["state"] == "DOWN", DOWN_AFTER + 4,
             what="the stopped agent's node to go DOWN")
    assert time.monotonic() - stopped < DOWN_AFTER + 4
    node = _node(c)
    assert node["reason"] == "Not responding" and not node["connected"]
    assert c.wait_done(lose, 10)["state"] == "NODE_FAIL"
    assert c.wait_state(keep, "PENDING", 10)["restarts"] == 1
    os.kill(apid, signal.SIGCONT)
    wait_for(lambda: _node(c)["connected"] and _node(c)["state"] != "DOWN", 20,
             what="the resumed agent to reconnect and its node to come back")
    # the old runs are orphans now: killed; the requeued job runs again
    for jid in (keep, lose):
        old = int((c.work / f"pid.{jid}.0").read_text())
        wait_for(lambda p=old: not _alive(p), 20, what=f"orphan run of job {jid} killed")
    c.wait_state(keep, "RUNNING", 30)
    _wait_pid_file(c, keep, 1)
    gate.write_text("go")
    done = c.wait_done(keep, 30)
    assert done["state"] == "COMPLETED" and done["restarts"] == 1


def test_stopped_agent_readopts_jobs_and_cancel_on_down_node(
        long_grace_cluster: Cluster) -> None:
    c = long_grace_cluster
    gate = c.work / "gate"
    live, early, late = (c.submit(_gate_cmd(gate)) for _ in range(3))
    pids = {}
    for jid in (live, early, late):
        c.wait_state(jid, "RUNNING")
        pids[jid] = _wait_pid_file(c, jid)
    apid = c.agent_pid()
    assert apid is not None
    os.kill(apid, signal.SIGSTOP)
    # cancelled while the agent is stopped but still connected: the cancel cannot
    # reach it; the call returns at once and the job ends CANCELLED when the node is
    # declared lost (at the latest after node_fail_grace_s, 60 s here: long before)
    t0 = time.monotonic()
    c.client.cancel([early])
    assert time.monotonic() - t0 < 2
    wait_for(lambda: _node(c)["state"] == "DOWN", DOWN_AFTER + 4, what="the node DOWN")
    assert c.wait_done(early, 5)["state"] == "CANCELLED"
    # cancelled once the node is known down: done at once
    t0 = time.monotonic()
    c.client.cancel([late])
    assert time.monotonic() - t0 < 2
    assert c.wait_done(late, 5)["state"] == "CANCELLED"
    assert c.job(live)["state"] == "RUNNING"  # within the grace: not touched
    os.kill(apid, signal.SIGCONT)
    wait_for(lambda: _node(c)["connected"], 20, what="the resumed agent to reconnect")
    wait_for(lambda: _node(c)["state"] in ("MIXED", "ALLOCATED"), 10, what="node back up")
    for jid in (early, late):  # their runs are killed once the agent is back
        wait_for(lambda p=pids[jid]: not _alive(p), 20, what=f"job {jid}'s run killed")
    assert c.job(live)["state"] == "RUNNING" and _alive(pids[live])  # re-adopted
    gate.write_text("go")
    job = c.wait_done(live, 20)
    assert job["state"] == "COMPLETED" and job["restarts"] == 0


class _Proxy:
    """A TCP forwarder whose existing connections can be cut silently: no more bytes
    either way, but both sockets stay open (a link down between two hosts)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self.cut_before = 0  # connections numbered below this carry nothing
        self.socks: list[socket.socket] = []
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            n = self.accepted
            self.accepted += 1
            up = socket.create_connection(self.upstream)
            self.socks += [client, up]
            for a, b in ((client, up), (up, client)):
                threading.Thread(target=self._pump, args=(a, b, n), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, n: int) -> None:
        src.settimeout(0.1)
        while not self.stop.is_set():
            if n < self.cut_before:
                time.sleep(0.1)  # cut: read nothing, send nothing, close nothing
                continue
            try:
                data = src.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            try:
                dst.sendall(data)
            except OSError:
                return

    def cut(self) -> None:
        self.cut_before = self.accepted

    def close(self) -> None:
        self.stop.set()
        self.listener.close()
        for s in self.socks:
            s.close()


def test_agent_reconnects_when_the_link_is_cut(tcp_cluster: Cluster) -> None:
    c = tcp_cluster
    url = json.loads((c.state_dir / "controller.json").read_text())["url"]
    host, port = url.removeprefix("http://").rsplit(":", 1)
    proxy = _Proxy((host, int(port)))
    log = open(c.state_dir / "log" / "agent2.log", "ab")
    p = subprocess.Popen([sys.executable, "-c", ENTRY, "agent", "--controller",
                          f"http://127.0.0.1:{proxy.port}", "--key-file",
                          str(c.state_dir / "cluster.key"), "--state-dir",
                          str(c.root / "agent2"), "--config", str(c.config), "--name", "n2"],
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    c.extra_procs.append(p)
    try:
        wait_for(lambda: any(n["name"] == "n2" and n["connected"]
                             for n in c.client.nodes()), 30, what="n2 to register")
        assert proxy.accepted == 1
        proxy.cut()
        # the agent hears nothing from the controller (no pong) and dials again; the
        # new connection goes through, and the node is up on it
        wait_for(lambda: proxy.accepted >= 2, 20, what="the agent to reconnect")
        wait_for(lambda: _node(c, "n2")["connected"] and _node(c, "n2")["state"] != "DOWN"
                 and proxy.accepted >= 2, 20, what="n2 up again on its new connection")
        assert p.poll() is None
    finally:
        proxy.close()
