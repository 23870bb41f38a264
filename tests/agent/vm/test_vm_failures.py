"""VM jobs that cannot start end FAILED at once with the reason in the job's error file
(no qemu needed: a missing image, a qemu that exits before its QMP socket is up)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.agent.runner import JobRunner
from corral.agent.vm.qemu import VmJob
from corral.vmimage.manifest import Manifest, write_manifest
from corral.vmimage.settings import VmConfig
from tests.agent.conftest import make_request, wait_exits


@pytest.fixture
def work() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="corral-vmfail-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def launch(runner: JobRunner, work: Path, job_id: int, cfg: VmConfig) -> str:
    req = make_request(job_id, work, "#!/bin/sh\necho never\n", cpus=(0,), mem_mb=256,
                       extra={"vm": VmJob(cfg, "", 256).to_text()},
                       env={"PATH": "/usr/bin:/bin"})
    t0 = time.monotonic()
    runner.launch(req)
    ex = wait_exits(runner, timeout_s=30)[job_id]
    assert ex.state == "FAILED" and ex.exit_code == 1, ex
    assert time.monotonic() - t0 < 15
    assert not (work / f"slurm-{job_id}.out").read_text().count("never")
    return (work / f"slurm-{job_id}.out").read_text()


def test_missing_image_fails_with_the_build_command(runner: JobRunner, work: Path) -> None:
    text = launch(runner, work, 81, VmConfig(image_dir=str(work / "nothing-here")))
    assert "no VM image" in text and "corral image build-vm" in text


def test_qemu_that_dies_at_once_fails_the_job_quickly(runner: JobRunner, work: Path) -> None:
    img = work / "images" / "default"
    img.mkdir(parents=True)
    (img / "vmlinux").write_bytes(b"\x7fELF")
    write_manifest(str(img), Manifest(name="default", kernel="vmlinux"))
    text = launch(runner, work, 82, VmConfig(image_dir=str(work / "images"), qemu="/bin/false"))
    assert "cannot start the VM: qemu exited before its QMP socket was up" in text
