"""Shared-cluster safety as a real second user (issue 11, items 3 and 4).

- The supervisor (root) appends Slurm's messages (cancelled, time limit) to the job's
  stderr file as the job's user: a user who swaps that file, or a directory above it, for
  a symbolic link to a root-owned file cannot get a line written into it.
- The state directory, database, WAL, logs and keys, and the agent's job spool (each
  job's environment), are private to the cluster's owner.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.cluster import Cluster, wait_for
from tests.e2e.conftest import USER

pytestmark = pytest.mark.root

SUBMIT = r"""
import json, sys
from corral.client import Client
from corral.core.model.job import JobSpec
from corral.submission import JobSubmission
sock, workdir, cmd, limit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
sub = JobSubmission(spec=JobSpec(name="hostile", time_limit_s=limit),
                    argv=("/bin/sh", "-c", cmd), workdir=workdir,
                    env={"PATH": "/usr/bin:/bin", "SECRET_TOKEN": "s3cret"})
print(json.dumps(Client(socket_path=sock).submit(sub)))
"""


def _as_user(*args: str) -> subprocess.CompletedProcess[str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    pw = pwd.getpwnam(USER)
    # the test's interpreter may sit where other users cannot enter: a system Python
    python = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
    return subprocess.run([python, *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": src, "HOME": "/tmp"},
                          user=pw.pw_uid, group=pw.pw_gid, extra_groups=[], cwd="/tmp")


def _submit_as_user(c: Cluster, workdir: Path, cmd: str, limit_s: int = 60) -> int:
    out = _as_user("-c", SUBMIT, str(c.sock), str(workdir), cmd, str(limit_s))
    assert out.returncode == 0, out.stderr
    return int(json.loads(out.stdout.strip().splitlines()[-1])[0])


def _user_dir(c: Cluster, name: str, pw: pwd.struct_passwd) -> Path:
    d = c.work / name
    d.mkdir()
    os.chown(d, pw.pw_uid, pw.pw_gid)
    return d


PRECIOUS = "root's file: nobody else writes here\n"


def test_cancel_message_does_not_follow_a_symlinked_stderr(
        root_cluster: Cluster, test_user: pwd.struct_passwd) -> None:
    """The job replaces its own output file with a link to a root-owned file, then is
    cancelled: the CANCELLED line must not land in root's file."""
    c = root_cluster
    target = c.root / "root-owned.txt"  # in a root-owned 0755 directory
    target.write_text(PRECIOUS)
    os.chmod(target, 0o644)
    wd = _user_dir(c, "final-link", test_user)
    out = "slurm-$SLURM_JOB_ID.out"
    jid = _submit_as_user(c, wd, f"rm -f {out}; ln -s {target} {out}; touch swapped; "
                                 "exec sleep 60")
    wait_for(lambda: (wd / "swapped").exists(), 30, what="the job to swap its output file")
    assert (wd / f"slurm-{jid}.out").is_symlink()
    assert c.client.cancel([jid])[0]["ok"]
    assert c.wait_done(jid)["state"] == "CANCELLED"
    assert target.read_text() == PRECIOUS


def test_time_limit_message_does_not_follow_a_symlinked_directory(
        root_cluster: Cluster, test_user: pwd.struct_passwd) -> None:
    """The job swaps its working directory (where its output file is) for a link to a
    root-owned directory holding a root-owned file of the same name, then runs into its
    time limit: O_NOFOLLOW alone would follow that link; opening as the user does not."""
    c = root_cluster
    wd = _user_dir(c, "dir-link", test_user)
    rootdir = c.root / "rootdir"
    rootdir.mkdir(mode=0o755)
    moved = c.work / "dir-link.moved"
    jid = _submit_as_user(c, wd, f"cd /; until [ -e {rootdir}/ready ]; do sleep 0.05; done; "
                                 f"mv {wd} {moved} && ln -s {rootdir} {wd} && "
                                 f"touch {moved}/swapped; exec sleep 60", limit_s=4)
    target = rootdir / f"slurm-{jid}.out"
    target.write_text(PRECIOUS)
    os.chmod(target, 0o644)
    (rootdir / "ready").touch()
    wait_for(lambda: (moved / "swapped").exists(), 30, what="the job to swap its directory")
    assert wd.is_symlink()
    job = c.wait_done(jid, timeout=60)
    assert job["state"] == "TIMEOUT", job
    assert target.read_text() == PRECIOUS
    # the user's real output file got nothing either (the path now leads elsewhere)
    assert "DUE TO TIME LIMIT" not in (moved / f"slurm-{jid}.out").read_text()


def test_message_still_reaches_the_users_own_file(root_cluster: Cluster,
                                                 test_user: pwd.struct_passwd) -> None:
    c = root_cluster
    wd = _user_dir(c, "plain", test_user)
    jid = _submit_as_user(c, wd, "touch started; exec sleep 60")
    wait_for(lambda: (wd / "started").exists(), 30, what="the job to start")
    assert c.client.cancel([jid])[0]["ok"]
    assert c.wait_done(jid)["state"] == "CANCELLED"
    out = wd / f"slurm-{jid}.out"
    wait_for(lambda: "CANCELLED AT" in out.read_text(), 10, what="the CANCELLED line")
    assert out.stat().st_uid == test_user.pw_uid


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_state_files_are_private(root_cluster: Cluster) -> None:
    c = root_cluster
    sd = c.state_dir
    jid = c.submit("true")  # some writes, so the WAL and shm files exist
    c.wait_done(jid)
    # root: users must reach the socket by name (0711), never list or read
    assert _mode(sd) == 0o711
    assert _mode(sd / "corral.sock") == 0o666
    for name in ("corral.db", "corral.db-wal", "corral.db-shm", "cluster.key", "jwt.key",
                 "controller.json"):
        assert (sd / name).exists(), name
        assert _mode(sd / name) == 0o600, (name, oct(_mode(sd / name)))
    assert _mode(sd / "log") == 0o700
    for name in ("controller.log", "agent.log"):
        assert _mode(sd / "log" / name) == 0o600, name


def test_spooled_request_is_root_only(root_cluster: Cluster,
                                      test_user: pwd.struct_passwd) -> None:
    """request.json holds the job's environment (here SECRET_TOKEN): 0600 in 0700
    directories, unreadable by the job's own user, and the job still runs."""
    c = root_cluster
    wd = _user_dir(c, "spool", test_user)
    jid = _submit_as_user(c, wd, "echo ok > ran; exec sleep 60")
    wait_for(lambda: (wd / "ran").exists(), 30, what="the job to run")
    jobs = c.state_dir / "agent" / "jobs"
    jdir = jobs.resolve() / str(jid)
    req = jdir / "request.json"
    assert "s3cret" in req.read_text()
    assert _mode(req) == 0o600
    assert _mode(jdir) == 0o700
    assert _mode(jobs.resolve()) == 0o700
    read = _as_user("-c", f"print(open({str(req)!r}).read())")
    assert read.returncode != 0 and "Permission denied" in read.stderr, read
    assert c.client.cancel([jid])[0]["ok"]
    c.wait_done(jid)
    assert (wd / "ran").read_text() == "ok\n"
