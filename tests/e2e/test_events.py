"""Job events on a real cluster: in order per job, as SSE and long polls, resumable after a
controller ``kill -9``, private to their owners, bounded per user."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import Cluster, corral, wait_for
from tests.e2e.conftest import USER

GET_AS_USER = r"""
import json, sys
from corral.client import Client, CorralError
c = Client(socket_path=sys.argv[1])
try:
    print(json.dumps(c.request("GET", sys.argv[2])))
except CorralError as exc:
    print(json.dumps({"error": exc.code, "message": exc.message}))
"""


def _as_user(sock: Path, path: str) -> Any:
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": src, "HOME": "/tmp"}
    pw = pwd.getpwnam(USER)
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    out = subprocess.run([python, "-c", GET_AS_USER, str(sock), path], capture_output=True,
                         text=True, env=env, timeout=60, user=pw.pw_uid, group=pw.pw_gid,
                         extra_groups=[], cwd="/tmp")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


class Sse:
    """A raw SSE reader on the controller's Unix socket."""

    def __init__(self, sock_path: Path, query: str, last_id: int | None = None) -> None:
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(10)
        self.s.connect(str(sock_path))
        extra = f"Last-Event-ID: {last_id}\r\n" if last_id is not None else ""
        self.s.sendall(f"GET /api/v1/events?{query} HTTP/1.1\r\nHost: x\r\n"
                       f"Accept: text/event-stream\r\n{extra}\r\n".encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.s.recv(65536)
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        self.status = int(head.split(b" ", 2)[1])
        self.head = head.decode()

    def events(self, n: int, timeout: float = 10) -> list[tuple[int, dict[str, Any]]]:
        """The next ``n`` events (chunked transfer framing stripped)."""
        end = time.monotonic() + timeout
        while True:
            out: list[tuple[int, dict[str, Any]]] = []
            for frame in self.buf.split(b"\n\n"):
                lines = dict(ln.split(b": ", 1) for ln in frame.split(b"\n")
                             if b": " in ln and not ln.startswith(b":"))
                if b"data" in lines:
                    out.append((int(lines[b"id"]), json.loads(lines[b"data"])))
            if len(out) >= n:
                return out
            assert time.monotonic() < end, f"only {len(out)} of {n} events: {self.buf!r}"
            chunk = self.s.recv(65536)
            assert chunk, "stream closed"
            self.buf += chunk

    def close(self) -> None:
        self.s.close()


def _by_job(evs: list[dict[str, Any]]) -> dict[int, list[tuple[str | None, str]]]:
    out: dict[int, list[tuple[str | None, str]]] = {}
    for e in evs:
        out.setdefault(int(e["job_id"]), []).append((e["old_state"], e["state"]))
    return out


def test_events_in_order_sse_and_long_poll(cluster: Cluster) -> None:
    c = cluster
    start = int(c.client.events_page()["next"])
    ok = c.submit("true", name="ev-ok", comment="wf-42")
    bad = c.submit("exit 3", name="ev-bad")
    for jid in (ok, bad):
        c.wait_done(jid)
    evs = list(c.client.events(start, jobs=[ok, bad], follow=False))
    ids = [e["id"] for e in evs]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    flow = [(None, "PENDING"), ("PENDING", "RUNNING")]
    assert _by_job(evs) == {ok: flow + [("RUNNING", "COMPLETED")],
                            bad: flow + [("RUNNING", "FAILED")]}
    end = [e for e in evs if e["state"] == "FAILED"][0]
    assert end["exit_code"] == 3 and end["end_time"] and end["name"] == "ev-bad"
    # the CLI: JSON Lines for programs, one line per event for people
    env = {**os.environ, "CORRAL_SOCKET": str(c.sock)}
    r = corral("events", "--since", str(start), "--jobs", str(bad), "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert [json.loads(ln)["state"] for ln in r.stdout.splitlines()] == [
        "PENDING", "RUNNING", "FAILED"]
    r = corral("events", "--since", str(start), "--jobs", str(bad), env=env)
    assert r.returncode == 0 and "RUNNING -> FAILED  exit 3:0" in r.stdout, r.stdout
    # a tag filter (comment or wckey)
    tagged = list(c.client.events(start, tags=["wf-42"], follow=False))
    assert {e["job_id"] for e in tagged} == {ok} and len(tagged) == 3

    # SSE: the same events, then a new one pushed as it happens
    sse = Sse(c.sock, f"since={start}&jobs={ok},{bad}")
    try:
        assert sse.status == 200 and "text/event-stream" in sse.head
        got = sse.events(6)
        assert [i for i, _ in got] == ids
    finally:
        sse.close()
    live = Sse(c.sock, "")  # from now on
    try:
        t0 = time.monotonic()
        jid = c.submit("true", name="ev-live")
        first = live.events(1)[0][1]
        took = time.monotonic() - t0
        assert first["job_id"] == jid and first["state"] == "PENDING"
        assert took < 1.0, took
    finally:
        live.close()
    c.wait_done(jid)
    # a long poll waits for the next event and answers as soon as it is committed
    cursor = int(c.client.events_page()["next"])
    jid2 = c.submit("true", name="ev-poll")
    page = c.client.events_page(cursor, jobs=[jid2], wait_s=10)
    assert [e["state"] for e in page["events"]][:1] == ["PENDING"]
    c.wait_done(jid2)


def test_bad_parameters_are_precise(cluster: Cluster) -> None:
    from corral.client import CorralError

    for kw, word in (({"limit": 0}, "limit"), ({"jobs": ["x1"]}, "jobs"),
                     ({"wait_s": 0}, None)):
        try:
            c_page = cluster.client.events_page(**kw)  # type: ignore[arg-type]
        except CorralError as exc:
            assert word is not None and word in exc.message and exc.status == 400
        else:
            assert word is None and "events" in c_page


def test_events_resume_after_kill9(fresh_cluster: Cluster) -> None:
    c = fresh_cluster
    gate = c.work / "gate"
    ids = [c.submit(f"while [ ! -e {gate} ]; do sleep 0.05; done", name=f"k{i}")
           for i in range(4)]
    for jid in ids:
        c.wait_state(jid, "RUNNING")
    before = list(c.client.events(0, jobs=ids, follow=False))
    assert len(before) == 8
    last = before[-1]["id"]
    pid = c.controller_pid()
    assert pid is not None
    c.kill9(pid)
    c.client.close()
    gate.write_text("go")  # the jobs end while no controller runs
    c.start_controller()
    c.client.close()
    for jid in ids:
        c.wait_done(jid)
    after = list(c.client.events(last, jobs=ids, follow=False))
    assert [e["state"] for e in after] == ["COMPLETED"] * 4
    assert all(e["id"] > last for e in after)
    everything = list(c.client.events(0, jobs=ids, follow=False))
    assert everything == before + after  # nothing lost, nothing repeated
    # SSE resumes from Last-Event-ID on the new controller
    sse = Sse(c.sock, f"jobs={','.join(map(str, ids))}", last_id=last)
    try:
        assert [i for i, _ in sse.events(4)] == [e["id"] for e in after]
    finally:
        sse.close()
    # a follower rides out another restart: it sees the job submitted after it
    code = ("import sys, json\nfrom corral.client import Client\n"
            f"c = Client(socket_path={str(c.sock)!r})\n"
            "for ev in c.events(int(sys.argv[1]), names=['after-restart']):\n"
            "    print(json.dumps(ev), flush=True)\n"
            "    if ev['state'] == 'COMPLETED': break\n")
    cursor = everything[-1]["id"]
    follower = subprocess.Popen([sys.executable, "-c", code, str(cursor)],
                                stdout=subprocess.PIPE, text=True)
    c.extra_procs.append(follower)  # type: ignore[arg-type]
    try:
        pid = c.controller_pid()
        assert pid is not None
        c.kill9(pid)
        c.start_controller()
        c.client.close()
        jid = c.submit("true", name="after-restart")
        out, _ = follower.communicate(timeout=60)
    finally:
        if follower.poll() is None:
            follower.kill()
    states = [json.loads(line)["state"] for line in out.splitlines()]
    assert states == ["PENDING", "RUNNING", "COMPLETED"], (jid, out)


@pytest.mark.root
def test_events_private_and_streams_bounded(root_cluster: Cluster) -> None:
    c = root_cluster
    mine = c.submit("true", name="root-secret")
    c.wait_done(mine)
    code = c.client.events_page(0)  # root sees every user's events
    assert any(e["job_id"] == mine for e in code["events"])
    page = _as_user(c.sock, "/events?since=0&format=json")
    assert isinstance(page, dict) and "events" in page, page
    assert all(e["user"] == USER for e in page["events"])
    denied = _as_user(c.sock, "/events?since=0&user=root")
    assert isinstance(denied, dict) and denied.get("error") == "forbidden", denied
    # at most max_event_streams_per_user open streams per user (16 by default)
    streams = [Sse(c.sock, "") for _ in range(16)]
    try:
        assert all(s.status == 200 for s in streams)
        over = Sse(c.sock, "")
        assert over.status == 429
        over.close()
    finally:
        for s in streams:
            s.close()
    wait_for(lambda: Sse(c.sock, "").status == 200, 10, what="a slot freed by a close")
