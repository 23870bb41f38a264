"""Identity from SO_PEERCRED: a real second user submits through the socket."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster

USER = "corraltest"

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def test_user() -> Iterator[pwd.struct_passwd]:
    if os.geteuid() != 0:
        pytest.skip("needs root to create a user")
    created = False
    try:
        pw = pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", USER], check=True)
        created = True
        pw = pwd.getpwnam(USER)
    yield pw
    if created:
        subprocess.run(["userdel", USER], check=False)


@pytest.fixture(scope="module")
def root_cluster(test_user: pwd.struct_passwd) -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="corral-users-"))
    c = Cluster(root)
    c.up()
    try:
        yield c
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


CLIENT = r"""
import json, sys
from corral.client import Client, CorralError
from corral.core.model.job import JobSpec
from corral.submission import JobSubmission
c = Client(socket_path=sys.argv[1])
action = sys.argv[2]
try:
    if action == "submit":
        # claims to be root: the server must ignore that and use the kernel's uid
        sub = JobSubmission(spec=JobSpec(name="userjob", user="root", uid=0, gid=0,
                                         time_limit_s=60),
                            argv=("/bin/sh", "-c", "id -u > uid.$SLURM_JOB_ID"),
                            workdir=sys.argv[3], env={"PATH": "/usr/bin:/bin"})
        print(json.dumps({"ids": c.submit(sub), "me": c.whoami()}))
    elif action == "cancel":
        print(json.dumps(c.cancel([sys.argv[3]])))
except CorralError as exc:
    print(json.dumps({"error": exc.code, "message": exc.message}))
"""


def _as_user(args: list[str]) -> dict | list:  # type: ignore[type-arg]
    import json

    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": src, "HOME": "/tmp"}
    pw = pwd.getpwnam(USER)
    # the client needs only the standard library; the test's interpreter may sit in a
    # directory other users cannot enter (/root/.pyenv), so use a system Python if any
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    out = subprocess.run([python, "-c", CLIENT, *args], capture_output=True, text=True,
                         env=env, timeout=60, user=pw.pw_uid, group=pw.pw_gid,
                         extra_groups=[], cwd="/tmp")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_job_runs_as_the_submitting_user(root_cluster: Cluster,
                                         test_user: pwd.struct_passwd) -> None:
    c = root_cluster
    res = _as_user([str(c.sock), "submit", str(c.work)])
    assert isinstance(res, dict) and "ids" in res, res
    assert res["me"]["uid"] == test_user.pw_uid and not res["me"]["operator"]
    jid = res["ids"][0]
    job = c.wait_done(jid)
    assert job["state"] == "COMPLETED", job
    assert job["user"] == USER and job["uid"] == test_user.pw_uid
    out = c.work / f"uid.{jid}"
    assert out.read_text().strip() == str(test_user.pw_uid)
    assert out.stat().st_uid == test_user.pw_uid


def test_user_cannot_cancel_another_users_job(root_cluster: Cluster) -> None:
    c = root_cluster
    jid = c.submit("sleep 60")  # root's job
    c.wait_state(jid, "RUNNING")
    res = _as_user([str(c.sock), "cancel", str(jid)])
    assert isinstance(res, list) and res[0]["ok"] is False and res[0]["code"] == "forbidden"
    assert c.job(jid)["state"] == "RUNNING"
    # root (an operator) may cancel anyone's job
    ujob = _as_user([str(c.sock), "submit", str(c.work)])
    assert isinstance(ujob, dict)
    assert c.client.cancel([jid])[0]["ok"]
    assert c.wait_done(jid)["state"] == "CANCELLED"
