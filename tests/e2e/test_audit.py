"""The audit trail (issue 11 item 7) on a real cluster, with a real second user.

Root drains a node and cancels another user's job: both are in ``GET /audit`` and
``corral audit`` with who, what, when and the outcome; a user's cancel of their own job is
not recorded; a non-operator gets 403 from ``/audit``; the response is bounded.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from corral.client import CorralError
from tests.e2e.cluster import Cluster, corral
from tests.e2e.conftest import USER

pytestmark = pytest.mark.root

USER_CLIENT = r"""
import json, sys
from corral.client import Client, CorralError
from corral.core.model.job import JobSpec
from corral.submission import JobSubmission
c = Client(socket_path=sys.argv[1])
try:
    if sys.argv[2] == "submit":
        sub = JobSubmission(spec=JobSpec(name="userjob", time_limit_s=60),
                            argv=("/bin/sh", "-c", "sleep 60"), workdir=sys.argv[3],
                            env={"PATH": "/usr/bin:/bin"})
        print(json.dumps({"ids": c.submit(sub)}))
    elif sys.argv[2] == "cancel":
        print(json.dumps(c.cancel([sys.argv[3]])))
    elif sys.argv[2] == "audit":
        print(json.dumps(c.request("GET", "/audit")))
except CorralError as exc:
    print(json.dumps({"error": exc.code, "status": exc.status}))
"""


def _as_user(pw: pwd.struct_passwd, action: str, sock: str, *rest: str) -> Any:
    args = [sock, action, *rest]
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": src, "HOME": "/tmp"}
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    out = subprocess.run([python, "-c", USER_CLIENT, *args], capture_output=True, text=True,
                         env=env, timeout=60, user=pw.pw_uid, group=pw.pw_gid,
                         extra_groups=[], cwd="/tmp")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_operator_actions_are_audited(cluster: Cluster, test_user: pwd.struct_passwd) -> None:
    c = cluster
    t0 = time.time()
    theirs = _as_user(test_user, "submit", str(c.sock), str(c.work))["ids"][0]
    c.wait_state(theirs, "RUNNING")
    own = _as_user(test_user, "submit", str(c.sock), str(c.work))["ids"][0]
    c.wait_state(own, "RUNNING")

    c.client.drain("testnode", "audit test")
    assert c.client.cancel([theirs])[0]["ok"]
    # the user cancels their own job: ordinary use, not an operator action
    assert _as_user(test_user, "cancel", str(c.sock), str(own))[0]["ok"]
    # the user tries another user's (root's) job: refused, and that attempt is recorded
    mine = c.submit("sleep 60")
    assert _as_user(test_user, "cancel", str(c.sock), str(mine))[0]["code"] == "forbidden"
    c.client.resume("testnode")
    c.client.cancel([mine])
    c.wait_done(theirs)
    c.wait_done(own)

    entries = c.client.request("GET", f"/audit?since={t0 - 1}")["entries"]
    by = {(e["action"], e["target"]): e for e in entries}
    drain = by[("drain", "node testnode")]
    assert (drain["user"], drain["uid"], drain["via"]) == ("root", 0, "socket")
    assert drain["details"]["reason"] == "audit test" and drain["outcome"] == "ok"
    assert t0 - 1 <= drain["time"] <= time.time()
    cancel = by[("cancel", f"job {theirs}")]
    assert (cancel["user"], cancel["uid"], cancel["outcome"]) == ("root", 0, "ok")
    assert cancel["details"]["owners"] == [USER]
    assert t0 - 1 <= cancel["time"] <= time.time()
    assert ("resume", "node testnode") in by
    assert ("cancel", f"job {own}") not in by  # a user's own cancel
    # root cancelling root's own job is not recorded either
    assert not [e for e in entries if e["target"] == f"job {mine}" and e["user"] == "root"]
    refused = [e for e in entries if e["target"] == f"job {mine}" and e["user"] == USER]
    assert refused and refused[0]["outcome"].startswith("forbidden")
    assert [e["id"] for e in entries] == sorted(e["id"] for e in entries)  # oldest first

    # bounded
    assert len(c.client.request("GET", "/audit?limit=1")["entries"]) == 1
    for bad in (0, 1001):
        with pytest.raises(CorralError) as err:
            c.client.request("GET", f"/audit?limit={bad}")
        assert err.value.status == 400

    # the CLI: --json and the table
    env = dict(os.environ, CORRAL_STATE_DIR=str(c.state_dir))
    r = corral("audit", "--json", "-n", "1000", env=env)
    assert r.returncode == 0, r.stderr
    assert {(e["action"], e["target"]) for e in json.loads(r.stdout)["entries"]} >= {
        ("drain", "node testnode"), ("cancel", f"job {theirs}")}
    r = corral("audit", "-n", "1000", env=env)
    assert r.returncode == 0, r.stderr
    assert "drain" in r.stdout and "node testnode" in r.stdout and f"job {theirs}" in r.stdout


def test_audit_is_for_operators_only(cluster: Cluster, test_user: pwd.struct_passwd) -> None:
    assert _as_user(test_user, "audit", str(cluster.sock)) == {"error": "forbidden",
                                                               "status": 403}


def test_token_for_another_user_is_audited(cluster: Cluster,
                                           test_user: pwd.struct_passwd) -> None:
    t0 = time.time()
    tok = cluster.client.request("POST", "/tokens", {"user": USER, "ttl_s": 60})
    assert tok["user"] == USER
    entries = cluster.client.request("GET", f"/audit?since={t0 - 1}")["entries"]
    minted = [e for e in entries if e["action"] == "token" and e["target"] == f"user {USER}"]
    assert minted and minted[-1]["user"] == "root" and minted[-1]["outcome"] == "ok"
    assert minted[-1]["details"]["ttl_s"] == 60
