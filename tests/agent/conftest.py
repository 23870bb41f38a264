"""Shared fixtures of the agent tests: a runner on a private state dir and cgroup root."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.agent import spool
from corral.agent.cgroups import detect_layout
from corral.agent.launch import JobExit, LaunchRequest
from corral.agent.proctree import is_alive
from corral.agent.runner import JobRunner

CGROUP_ROOT = f"corral-test-{os.getpid()}"


def make_request(job_id: int, workdir: Path | str, script: str | None = None,
                 **kw: object) -> LaunchRequest:
    fields: dict[str, object] = dict(job_id=job_id, name=f"job{job_id}", user="root",
                                     uid=os.geteuid(), gid=os.getegid(), workdir=str(workdir),
                                     script=script, kill_grace_s=1)
    fields.update(kw)
    return LaunchRequest(**fields)  # type: ignore[arg-type]


def wait_exits(runner: JobRunner, count: int = 1, timeout_s: float = 15.0) -> dict[int, JobExit]:
    """Poll ``runner`` until ``count`` exits came in (deadline ``timeout_s``)."""
    got: dict[int, JobExit] = {}
    deadline = time.monotonic() + timeout_s
    while len(got) < count:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"only {len(got)} of {count} jobs ended within {timeout_s}s: "
                                 f"{sorted(got)}; running: {runner.running()}")
        runner.wait(min(left, 0.2))
        for e in runner.poll():
            got[e.job_id] = e
    return got


def wait_for(cond: object, timeout_s: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def kill_leftovers(state_dir: Path) -> None:
    """End every supervisor and job process a test left running (by recorded pid)."""
    base = spool.jobs_dir(state_dir)
    if not base.exists():
        return
    for jdir in base.iterdir():
        st = spool.read_json(jdir / spool.STATUS) or {}
        job_pid, job_ticks = st.get("job_pid"), st.get("job_ticks")
        if job_pid and is_alive(int(job_pid), job_ticks):
            try:
                os.killpg(int(job_pid), signal.SIGKILL)
            except OSError:
                pass
        pid, ticks = st.get("supervisor_pid"), st.get("supervisor_ticks")
        if pid and is_alive(int(pid), ticks):
            os.kill(int(pid), signal.SIGKILL)


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[JobRunner]:
    r = JobRunner(tmp_path / "state", cgroup_root=CGROUP_ROOT, node_name="testnode")
    yield r
    for jid in r.running():
        r.cancel(jid, grace_s=0)
    try:
        wait_for(lambda: not r.running(), timeout_s=5, what="jobs to end")
    except AssertionError:
        pass
    kill_leftovers(tmp_path / "state")
    r.close()


@pytest.fixture
def bare_runner(tmp_path: Path) -> Iterator[JobRunner]:
    """A runner with cgroups switched off: the rlimit/affinity fallback path."""
    r = JobRunner(tmp_path / "state-bare", cgroup_root=CGROUP_ROOT, node_name="testnode",
                  isolation="none", mem_poll_s=0.1)
    yield r
    for jid in r.running():
        r.cancel(jid, grace_s=0)
    kill_leftovers(tmp_path / "state-bare")
    r.close()


@pytest.fixture(scope="session", autouse=True)
def _remove_test_cgroups() -> Iterator[None]:
    yield
    layout = detect_layout()
    bases = list(layout.v1.values()) + [p for p in (layout.v2_root, layout.tracking) if p]
    for base in bases:
        root = os.path.join(base, CGROUP_ROOT)
        for dirpath, _dirs, _files in sorted(os.walk(root), key=lambda w: -len(w[0])):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass


TEST_USER = "corral_agt"
TEST_GROUP = "corral_agt_grp"


@pytest.fixture(scope="session")
def test_user() -> tuple[str, int, int, int]:
    """(name, uid, gid, supplementary gid) of a local test user; created when missing.

    Left in place afterwards: another test session may be using it at the same time.
    """
    import grp
    import shutil

    if os.geteuid() != 0:
        pytest.skip("running jobs as another user needs root")
    if shutil.which("useradd") is None:
        pytest.skip("useradd is not installed")
    from tests.users import ensure_user

    pw = ensure_user(TEST_USER, (TEST_GROUP,))
    return TEST_USER, pw.pw_uid, pw.pw_gid, grp.getgrnam(TEST_GROUP).gr_gid
