"""Identity from SO_PEERCRED: a real second user submits through the socket."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster
from tests.e2e.conftest import USER

pytestmark = pytest.mark.root


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
        cmd = sys.argv[4] if len(sys.argv) > 4 else "id -u > uid.$SLURM_JOB_ID"
        sub = JobSubmission(spec=JobSpec(name="userjob", user="root", uid=0, gid=0,
                                         time_limit_s=60),
                            argv=("/bin/sh", "-c", cmd),
                            workdir=sys.argv[3], env={"PATH": "/usr/bin:/bin"})
        print(json.dumps({"ids": c.submit(sub), "me": c.whoami()}))
    elif action == "cancel":
        print(json.dumps(c.cancel([sys.argv[3]])))
    elif action == "step":
        print(json.dumps({"step": c.start_step(sys.argv[3], ["hostname"])}))
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


def test_steps_only_on_own_jobs(root_cluster: Cluster) -> None:
    c = root_cluster
    theirs = c.submit("sleep 60")  # root's job
    c.wait_state(theirs, "RUNNING")
    res = _as_user([str(c.sock), "step", str(theirs)])
    assert isinstance(res, dict) and res.get("error") == "forbidden", res
    assert c.job(theirs)["steps"] == []
    mine = _as_user([str(c.sock), "submit", str(c.work), "sleep 60"])
    assert isinstance(mine, dict)
    jid = mine["ids"][0]
    c.wait_state(jid, "RUNNING")
    assert _as_user([str(c.sock), "step", str(jid)]) == {"step": 0}
    assert c.client.start_step(jid, ["by-root"]) == 1  # an operator may too
    c.client.cancel([theirs, jid])
    c.wait_done(theirs)
    c.wait_done(jid)


# ---- `corral up` as an ordinary user ------------------------------------------------------

SYSTEM_PYTHON = "/usr/bin/python3"
REPO = Path(__file__).resolve().parents[2]
SITE = REPO / ".venv" / "lib" / "python3.11" / "site-packages"
CLI = "from corral.cli.main import main; main()"


def _system_python_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create the test user and to run commands as that user"
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        return f"{SYSTEM_PYTHON} is missing: the test user cannot run the venv's python"
    out = subprocess.run([SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"],
                         capture_output=True, text=True, timeout=30)
    if out.stdout.strip() != "(3, 11)":
        return (f"{SYSTEM_PYTHON} is {out.stdout.strip()}, not 3.11: the venv's compiled "
                "packages would not load")
    if not SITE.is_dir():
        return f"no venv site-packages at {SITE}"
    return None


def test_corral_up_as_an_ordinary_user(test_user: pwd.struct_passwd) -> None:
    reason = _system_python_reason()
    if reason:
        pytest.skip(reason)
    import json

    from corral.client import Client, CorralError
    from tests.e2e.cluster import TEST_CONFIG, wait_for

    root = Path(tempfile.mkdtemp(prefix="corral-user-up-"))
    os.chmod(root, 0o755)
    home, work, sd = root / "home", root / "work", root / "state"
    for d in (home, work, sd):
        d.mkdir()
        os.chown(d, test_user.pw_uid, test_user.pw_gid)
    cfg = root / "corral.toml"
    cfg.write_text(TEST_CONFIG)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
           "PYTHONPATH": f"{REPO / 'src'}:{SITE}"}

    def as_user(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
        return subprocess.run([SYSTEM_PYTHON, "-c", CLI, *args], capture_output=True,
                              text=True, env=env, timeout=timeout, user=test_user.pw_uid,
                              group=test_user.pw_gid, extra_groups=[], cwd=str(work))

    up = as_user("up", "--detach", "--state-dir", str(sd), "--config", str(cfg),
                 "--node-name", "usernode")
    pids: list[int] = []
    try:
        logs = "".join((sd / "log" / n).read_text() for n in ("controller.log", "agent.log")
                       if (sd / "log" / n).exists())
        assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{logs}"
        pids = [int(json.loads((sd / "controller.json").read_text())["pid"]),
                int((sd / "agent.pid").read_text())]
        for pid in pids:  # the daemons run as the user
            assert os.stat(f"/proc/{pid}").st_uid == test_user.pw_uid
        assert stat_mode(sd / "corral.sock") == 0o600
        # the user submits; the job runs as the user
        env["CORRAL_STATE_DIR"] = str(sd)
        res = as_user("submit", "--json", "--wrap", "id -u > uid.$SLURM_JOB_ID")
        assert res.returncode == 0, res.stderr
        jid = json.loads(res.stdout)["job_ids"][0]
        with Client(socket_path=str(sd / "corral.sock")) as cl:  # root may connect
            wait_for(lambda: cl.job(jid)["state"] in ("COMPLETED", "FAILED"), 60,
                     what="the user's job")
            job = cl.job(jid)
            assert job["state"] == "COMPLETED" and job["uid"] == test_user.pw_uid, job
            out = work / f"uid.{jid}"
            assert out.read_text().strip() == str(test_user.pw_uid)
            assert out.stat().st_uid == test_user.pw_uid
            # a job for another uid (root here) is refused at submit, clearly
            with pytest.raises(CorralError) as err:
                cl.submit({"spec": {"name": "x", "user": "root", "uid": 0, "gid": 0},
                           "argv": ["true"], "workdir": "/tmp"})
            assert err.value.code == "forbidden"
            assert f"runs jobs only as {USER}" in err.value.message, err.value.message
            assert "start the cluster as root" in err.value.message
        down = as_user("down", "--state-dir", str(sd))
        assert down.returncode == 0 and "stopped the cluster" in down.stdout, down
        for pid in pids:
            wait_for(lambda p=pid: not os.path.exists(f"/proc/{p}") or
                     open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] == "Z",
                     20, what=f"daemon {pid} to stop")
    finally:
        for pid in pids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        shutil.rmtree(root, ignore_errors=True)
        for base in ("/dev/shm", "/run"):  # the user's (now empty) job spool parent
            spool = Path(base) / f"corral-{test_user.pw_uid}"
            if spool.is_dir() and spool.stat().st_uid == test_user.pw_uid:
                shutil.rmtree(spool, ignore_errors=True)


def stat_mode(path: Path) -> int:
    import stat

    return stat.S_IMODE(path.stat().st_mode)
