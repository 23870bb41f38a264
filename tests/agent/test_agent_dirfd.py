"""Files reached through cached directory descriptors (``proctree.in_dir``): a directory
removed and made again under the same path is found again, never written through the
old descriptor; a forked child does not use its parent's descriptors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corral.agent import proctree, spool
from corral.agent.cgroups import _read, _write, detect_layout


def test_spool_files_follow_a_directory_made_again(tmp_path: Path) -> None:
    jdir = tmp_path / "7"
    jdir.mkdir()
    spool.write_json(jdir / "status.json", {"n": 1})
    assert spool.read_json(jdir / "status.json") == {"n": 1}
    assert spool.create_json(jdir / "exit.json", {"n": 2})
    assert not spool.create_json(jdir / "exit.json", {"n": 3})  # the claim is exclusive
    assert spool.read_json(jdir / "exit.json") == {"n": 2}
    assert spool.take_commands(str(jdir)) == []
    for name in os.listdir(jdir):
        os.unlink(jdir / name)
    jdir.rmdir()
    jdir.mkdir()  # same path, another directory (a requeued job's next run)
    assert spool.read_json(jdir / "status.json") is None
    spool.write_json(jdir / "status.json", {"n": 4})
    assert (jdir / "status.json").read_text() == '{"n":4}'  # in the new directory
    assert spool.create_json(jdir / "exit.json", {"n": 5})
    assert sorted(os.listdir(jdir)) == ["exit.json", "status.json"]
    spool.post_command(jdir, {"cmd": "cancel"})
    assert spool.take_commands(str(jdir)) == [{"cmd": "cancel"}]


def test_missing_file_in_a_live_directory_is_not_retried_forever(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        proctree.read_in_dir(str(tmp_path / "nothing-here"))
    (tmp_path / "x").write_bytes(b"abc")
    assert proctree.read_in_dir(str(tmp_path / "x")) == b"abc"


def test_forked_child_does_not_use_the_parent_descriptors(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"parent")
    assert proctree.read_in_dir(str(tmp_path / "f")) == b"parent"
    assert str(tmp_path) in proctree._dir_fds
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        ok = str(tmp_path) not in proctree._dir_fds
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    assert os.read(r, 1) == b"1"
    os.close(r)
    assert str(tmp_path) in proctree._dir_fds  # the parent's cache is untouched


def test_cgroup_directory_made_again_is_written_not_the_old_one() -> None:
    layout = detect_layout()
    mem = layout.v1.get("memory") if layout.mode == "v1" else layout.v2_root
    if mem is None or not os.access(mem, os.W_OK):
        pytest.skip("no writable memory cgroup here")
    limit_file = "memory.limit_in_bytes" if layout.mode == "v1" else "memory.max"
    base = os.path.join(mem, f"corral-test-dirfd-{os.getpid()}")
    try:
        os.mkdir(base)
        _write(os.path.join(base, limit_file), str(64 << 20))
        assert int((_read(os.path.join(base, limit_file)) or "0").strip()) == 64 << 20
        os.rmdir(base)  # cgroupfs keeps a removed directory's link count: checked by inode
        os.mkdir(base)
        fresh = (_read(os.path.join(base, limit_file)) or "").strip()
        assert fresh and fresh != str(64 << 20)
        _write(os.path.join(base, limit_file), str(32 << 20))
        with open(os.path.join(base, limit_file)) as f:
            assert int(f.read().strip()) == 32 << 20
    finally:
        proctree.forget_dirs(base)
        try:
            os.rmdir(base)
        except OSError:
            pass
