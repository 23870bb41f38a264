"""The device filter of ``corral.agent.devices`` on the real kernel: the cgroup v1
``devices.deny`` list and the cgroup v2 eBPF program (attached here to a directory of the
unified hierarchy, which hybrid hosts mount beside v1; the kernel runs both checks)."""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from corral.agent import devices

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mknod and cgroups need root")


@pytest.fixture()
def fake_gpus(tmp_path: Path) -> list[str]:
    out = []
    for i in range(2):
        path = tmp_path / f"nvidia{i}"
        os.mknod(path, 0o666 | 0o020000, os.makedev(195, i))
        out.append(str(path))
    return out


def _probe(join: Callable[[int], None], paths: list[str]) -> list[str]:
    """errno names of opening each path from a child that joined the cgroup first."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            join(os.getpid())
            res = []
            for p in paths:
                try:
                    os.close(os.open(p, os.O_RDWR))
                    res.append("open")
                except OSError as exc:
                    res.append(errno.errorcode[exc.errno])
            os.write(w, ",".join(res).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = os.read(r, 4096).decode()
    os.close(r)
    os.waitpid(pid, 0)
    return data.split(",")


def _cgroup(base: str, name: str) -> Iterator[str]:
    if not os.path.isdir(base):
        pytest.skip(f"{base} is not mounted")
    path = os.path.join(base, name)
    os.makedirs(path, exist_ok=True)
    try:
        yield path
    finally:
        os.rmdir(path)


@pytest.fixture()
def v2_dir() -> Iterator[str]:
    for base in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
        if os.path.exists(os.path.join(base, "cgroup.procs")) and \
                not os.path.isdir(os.path.join(base, "devices")):
            yield from _cgroup(base, f"corral-devtest-{os.getpid()}")
            return
    pytest.skip("no cgroup v2 hierarchy")


@pytest.fixture()
def v1_dir() -> Iterator[str]:
    yield from _cgroup("/sys/fs/cgroup/devices", f"corral-devtest-{os.getpid()}")


def _join(cg: str) -> Callable[[int], None]:
    def join(pid: int) -> None:
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(pid))
    return join


def test_v2_filter_hides_only_the_listed_devices(fake_gpus: list[str], v2_dir: str) -> None:
    paths = [*fake_gpus, "/dev/null"]
    assert _probe(_join(v2_dir), paths) == ["ENXIO", "ENXIO", "open"]  # no driver: ENXIO
    devices.deny({"v2": v2_dir}, (fake_gpus[1],))
    assert _probe(_join(v2_dir), paths) == ["ENXIO", "EPERM", "open"]


def test_v1_deny_list(fake_gpus: list[str], v1_dir: str) -> None:
    devices.deny({"devices": v1_dir}, (fake_gpus[0], "/nonexistent", "/etc/hostname"))
    assert _probe(_join(v1_dir), [*fake_gpus, "/dev/null"]) == ["EPERM", "ENXIO", "open"]


def test_rules_and_program_shape(fake_gpus: list[str]) -> None:
    assert devices.rules_of([*fake_gpus, fake_gpus[0], "/nope", "/etc/hostname"]) == [
        ("c", 195, 0), ("c", 195, 1)]
    code = devices.filter_program([("c", 195, 3)])
    insns = [struct.unpack_from("<BBhi", code, i) for i in range(0, len(code), 8)]
    assert len(insns) == 4 + 5 + 2
    assert insns[4] == (0x55, 2, 4, 2) and insns[5] == (0x55, 3, 3, 195)
    assert insns[-2] == (0xB7, 0, 0, 1) and insns[-1][0] == 0x95
    devices.deny({}, ())  # nothing to hide: nothing to do
    with pytest.raises(OSError):
        devices.deny({}, (fake_gpus[0],))
