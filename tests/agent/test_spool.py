"""The job spool's setup: linked from the state dir, stale ones collected, fresh ones never."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import threading
from pathlib import Path

from corral.agent import spool


def _base(tmp_path: Path) -> Path:
    base = tmp_path / "mem"
    base.mkdir()
    return base


def test_spool_is_a_private_dir_linked_from_the_state_dir(tmp_path: Path) -> None:
    base = _base(tmp_path)
    state = tmp_path / "state"
    target = spool.open_spool(state, str(base))
    assert target.parent == base / f"corral-{os.geteuid()}"
    assert os.readlink(state / "jobs") == str(target)
    assert os.stat(target).st_mode & 0o777 == 0o700
    assert (target / "state_dir").read_text() == str(state.resolve())
    assert spool.open_spool(state, str(base)) == target  # opened again: the same one


def test_a_spool_whose_state_dir_is_gone_is_collected(tmp_path: Path) -> None:
    base = _base(tmp_path)
    gone, live = tmp_path / "gone", tmp_path / "live"
    old = spool.open_spool(gone, str(base))
    (gone / "jobs").unlink()
    kept = spool.open_spool(live, str(base))
    spool.open_spool(tmp_path / "third", str(base))
    assert not old.exists()
    assert kept.is_dir()


def test_a_spool_being_set_up_is_not_taken_for_stale(tmp_path: Path) -> None:
    """Another agent holds the lock with its spool made but not linked yet: an agent
    starting now waits and leaves that spool alone (it used to remove it)."""
    base = _base(tmp_path)
    top = base / f"corral-{os.geteuid()}"
    top.mkdir(mode=0o700)
    half = top / "agent-half"
    half.mkdir(mode=0o700)
    other_state = tmp_path / "other"
    other_state.mkdir()
    (half / "state_dir").write_text(str(other_state.resolve()))
    fd = os.open(top / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    opened: list[Path] = []
    starter = threading.Thread(target=lambda: opened.append(
        spool.open_spool(tmp_path / "mine", str(base))))
    starter.start()
    starter.join(0.3)
    assert starter.is_alive(), "set up a spool without the base's lock"
    os.symlink(half, other_state / "jobs")  # the other agent finishes its setup
    os.close(fd)
    starter.join(10)
    assert opened and opened[0].is_dir()
    assert half.is_dir()


def _open_many(state_root: str, base: str, n: int) -> None:
    for i in range(n):
        jobs = spool.open_spool(Path(state_root) / f"{os.getpid()}-{i}", base)
        os.listdir(jobs)  # what the agent does first (adopting jobs): must exist


def test_agents_starting_together_keep_each_others_spools(tmp_path: Path) -> None:
    base = _base(tmp_path)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_open_many, args=(str(tmp_path), str(base), 40))
             for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    links = [d / "jobs" for d in tmp_path.iterdir() if (d / "jobs").is_symlink()]
    assert len(links) == 160
    assert all(Path(os.readlink(link)).is_dir() for link in links)
