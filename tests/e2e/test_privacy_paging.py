"""Issue 11 items 4 and 5: a job's script and environment are shown only to its owner and
operators; list endpoints return bounded pages (``limit``/``after``/``next_after``)."""

from __future__ import annotations

import json
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from corral.controller.paging import MAX_ROWS
from corral.core.model.job import JobSpec
from corral.submission import JobSubmission
from tests.e2e.cluster import Cluster
from tests.e2e.conftest import USER

pytestmark = pytest.mark.root

SECRET = "hunter2-secret-value"

CLIENT = r"""
import json, sys
from corral.client import Client, CorralError
from corral.core.model.job import JobSpec
from corral.submission import JobSubmission
c = Client(socket_path=sys.argv[1])
action = sys.argv[2]
try:
    if action == "submit":
        sub = JobSubmission(spec=JobSpec(name="bjob", user="x", uid=0, gid=0,
                                         time_limit_s=60),
                            script="#!/bin/sh\necho B-SCRIPT-SECRET\nsleep 30\n",
                            workdir="/tmp", env={"PATH": "/usr/bin:/bin", "B_SECRET": "b-env"})
        print(json.dumps({"ids": c.submit(sub)}))
    elif action == "job":
        print(json.dumps(c.request("GET", "/jobs/" + sys.argv[3])))
    elif action == "post":
        print(json.dumps(c.request("POST", sys.argv[3], json.loads(sys.argv[4]))))
except CorralError as exc:
    print(json.dumps({"error": exc.code, "message": exc.message}))
"""


def _as_user(args: list[str]) -> object:
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": src, "HOME": "/tmp"}
    pw = pwd.getpwnam(USER)
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    out = subprocess.run([python, "-c", CLIENT, *args], capture_output=True, text=True,
                         env=env, timeout=60, user=pw.pw_uid, group=pw.pw_gid,
                         extra_groups=[], cwd="/tmp")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def _root_job(c: Cluster) -> int:
    sub = JobSubmission(spec=JobSpec(name="rootjob", user="root", uid=0, gid=0,
                                     time_limit_s=60),
                        script=f"#!/bin/sh\necho {SECRET}\nsleep 30\n", workdir=str(c.work),
                        env={"PATH": "/usr/bin:/bin", "MY_TOKEN": SECRET})
    return int(c.client.submit(sub)[0])


def test_script_and_env_only_for_owner_and_operators(root_cluster: Cluster) -> None:
    c = root_cluster
    jid = _root_job(c)
    mine = c.client.request("GET", f"/jobs/{jid}")
    assert SECRET in mine["submission"]["script"]
    assert mine["submission"]["env"]["MY_TOKEN"] == SECRET
    # another user: the job, without script, env or argv
    theirs = _as_user([str(c.sock), "job", str(jid)])
    assert isinstance(theirs, dict) and theirs["id"] == jid, theirs
    assert "script" not in theirs["submission"] and "env" not in theirs["submission"]
    assert SECRET not in json.dumps(theirs)
    # nor through the list and history routes, nor scontrol show job in the shims server
    for path, body in (("/jobs/query", {"ids": [str(jid)], "include_finished": True}),
                       ("/jobs/query", {"ids": [str(jid)], "fields": ["id", "command"]}),
                       ("/history", {"ids": [str(jid)], "all_users": True})):
        res = _as_user([str(c.sock), "post", path, json.dumps(body)])
        assert isinstance(res, dict) and res["jobs"], res
        assert SECRET not in json.dumps(res), (path, res)
    # user B's own job: B sees its script and env; root (operator) does too
    b = _as_user([str(c.sock), "submit"])
    assert isinstance(b, dict) and "ids" in b, b
    bid = b["ids"][0]
    own = _as_user([str(c.sock), "job", str(bid)])
    assert isinstance(own, dict)
    assert "B-SCRIPT-SECRET" in own["submission"]["script"]
    assert own["submission"]["env"]["B_SECRET"] == "b-env"
    as_root = c.client.request("GET", f"/jobs/{bid}")
    assert "B-SCRIPT-SECRET" in as_root["submission"]["script"]
    assert as_root["submission"]["env"]["B_SECRET"] == "b-env"
    # B still cannot read root's job
    assert SECRET not in json.dumps(_as_user([str(c.sock), "job", str(jid)]))
    c.client.cancel([jid, bid])
    c.wait_done(jid)
    c.wait_done(bid)


def test_list_routes_are_paged(root_cluster: Cluster) -> None:
    c = root_cluster
    ids = [int(i) for i in c.client.submit(JobSubmission(
        spec=JobSpec(name="many", user="root", uid=0, gid=0, time_limit_s=60),
        argv=("/bin/true",), workdir=str(c.work), array="0-24"))]
    for j in ids:
        c.wait_done(j)
    # a page of 10 and the cursor; paging with after reaches every job exactly once
    for path, base in (("/jobs/query", {"include_finished": True}), ("/history", {})):
        seen: list[int] = []
        after = None
        for _ in range(100):
            body = dict(base, limit=10)
            if after is not None:
                body["after"] = after
            res = c.client.request("POST", path, body)
            assert len(res["jobs"]) <= 10
            seen += [r["id"] for r in res["jobs"]]
            after = res["next_after"]
            if after is None:
                break
        assert set(ids) <= set(seen) and len(seen) == len(set(seen)), (path, seen)
        first = c.client.request("POST", path, dict(base, limit=10))
        assert len(first["jobs"]) == 10 and first["next_after"] == first["jobs"][-1]["id"]
        for bad in ({"limit": 0}, {"limit": MAX_ROWS + 1}, {"after": -1}):
            with pytest.raises(Exception) as exc:
                c.client.request("POST", path, dict(base, **bad))
            assert getattr(exc.value, "status", None) == 400, (path, bad, exc.value)
