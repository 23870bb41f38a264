"""GPU device isolation (issue 11, item 6): a job can open the device files of the GPUs it
was given and not those of the node's other GPUs, whatever CUDA_VISIBLE_DEVICES says.

There is no GPU here, so the node's "GPUs" are character devices made with ``mknod`` with
NVIDIA's major number (195): opening an allowed one fails with ENXIO (no driver behind
it), a hidden one with EPERM (the cgroup refused it) — the difference this test reads.
The same code path runs on cgroup v2 with the eBPF filter (``tests/agent/test_devices``)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import TEST_CONFIG, Cluster

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mknod and cgroups need root")

PROBE = """
for f in {files}; do
  python3 - "$f" <<'EOF'
import errno, os, sys
try:
    os.close(os.open(sys.argv[1], os.O_RDWR))
    print(os.path.basename(sys.argv[1]), "open")
except OSError as e:
    print(os.path.basename(sys.argv[1]), errno.errorcode[e.errno])
EOF
done
echo "visible=$CUDA_VISIBLE_DEVICES"
"""


@pytest.fixture(scope="module")
def gpu_cluster() -> Iterator[tuple[Cluster, list[str]]]:
    root = Path(tempfile.mkdtemp(prefix="corral-gpu-"))
    devdir = root / "dev"
    devdir.mkdir()
    files = []
    for i in range(3):
        path = devdir / f"nvidia{i}"
        os.mknod(path, 0o666 | 0o020000, os.makedev(195, i))  # S_IFCHR
        files.append(str(path))
    config = TEST_CONFIG.replace("[agent]\n", f"[agent]\ngpu_devices = {files!r}\n".replace(
        "'", '"')).replace('mem_mb = 8000\n', 'mem_mb = 8000\ngpus = 3\n')
    c = Cluster(root, config)
    c.up()
    try:
        yield c, files
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


def _run(c: Cluster, files: list[str], **kw: object) -> dict[str, str]:
    out = c.work / f"gpu-{len(os.listdir(c.work))}.out"
    jid = c.submit(PROBE.format(files=" ".join(files)), stdout=str(out), **kw)
    rec = c.wait_done(jid)
    assert rec["state"] == "COMPLETED", (rec, c.logs())
    lines = out.read_text().split()
    result = dict(zip(lines[:-1:2], lines[1:-1:2], strict=True))
    result["visible"] = lines[-1].split("=", 1)[1]
    return result


def test_a_job_opens_only_its_own_gpus(gpu_cluster: tuple[Cluster, list[str]]) -> None:
    c, files = gpu_cluster
    res = _run(c, files, gpus=1)
    mine = {f"nvidia{i}" for i in res["visible"].split(",")}
    assert len(mine) == 1
    for name in ("nvidia0", "nvidia1", "nvidia2"):
        assert res[name] == ("ENXIO" if name in mine else "EPERM"), res


def test_two_gpus_and_none(gpu_cluster: tuple[Cluster, list[str]]) -> None:
    c, files = gpu_cluster
    res = _run(c, files, gpus=2)
    mine = {f"nvidia{i}" for i in res["visible"].split(",")}
    assert len(mine) == 2
    assert {n for n in ("nvidia0", "nvidia1", "nvidia2") if res[n] == "ENXIO"} == mine
    res = _run(c, files)
    assert [res[n] for n in ("nvidia0", "nvidia1", "nvidia2")] == ["EPERM"] * 3, res
    # other devices stay usable
    out = c.work / "null.out"
    jid = c.submit("echo x > /dev/null && echo fine", stdout=str(out))
    assert c.wait_done(jid)["state"] == "COMPLETED"
    assert out.read_text().strip() == "fine"
