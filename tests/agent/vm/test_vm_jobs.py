"""VM jobs on a real agent runner: qemu boots the default guest built from this machine's
Debian kernel and busybox, and the job runs inside it.

The VMs use KVM where ``/dev/kvm`` can run the stock kernel; elsewhere (no KVM, or a
PVM hypervisor, as on the Firecracker hosts this project is developed on) they run under
qemu's TCG emulator, which exercises the same path (image, shares, ports, QMP pinning,
signals, exit codes) at emulation speed; ``CORRAL_TEST_VM=kvm`` refuses that fallback
(the tests skip instead) and ``CORRAL_TEST_VM=off`` skips them. Boot-time numbers are
bench/vm_bench.py's business, not these tests'.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.agent.proctree import is_alive
from corral.agent.runner import JobRunner
from corral.agent.vm.discover import kvm_problem
from corral.agent.vm.qemu import VmJob
from corral.vmimage.build import BuildError, build_vm_image
from corral.vmimage.manifest import Manifest, write_manifest
from corral.vmimage.settings import VmConfig
from tests.agent.conftest import make_request, wait_exits, wait_for

pytestmark = pytest.mark.slow
BOOT_S = 180.0  # deadline for a VM job to get going under TCG on a loaded 2-core host


def core_only_under_emulation(cfg: VmConfig) -> None:
    """Under emulation (KVM unusable) a guest boots in tens of seconds: the suite then
    runs the core VM tests only (guest, user, output, exit code, pinning, cancel);
    ``CORRAL_TEST_VM=all`` runs every one."""
    if cfg.accel == "tcg" and os.environ.get("CORRAL_TEST_VM", "auto") != "all":
        pytest.skip("emulated guest (KVM unusable here): a core-only run; "
                    "CORRAL_TEST_VM=all runs this test too")


@pytest.fixture(scope="module")
def vm_settings() -> Iterator[VmConfig]:
    mode = os.environ.get("CORRAL_TEST_VM", "auto")
    if mode == "off":
        pytest.skip("CORRAL_TEST_VM=off")
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 is not installed (qemu-system-x86)")
    problem = kvm_problem()
    if problem and mode == "kvm":
        pytest.skip(f"KVM unusable: {problem}")
    root = Path(tempfile.mkdtemp(prefix="corral-vmimg-", dir="/tmp"))
    os.chmod(root, 0o755)
    try:
        build_vm_image(str(root / "default"))
    except (BuildError, OSError) as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"cannot build the guest here: {exc}")
    if problem:  # emulation: q35 (microvm has no timer TCG can calibrate against)
        cfg = VmConfig(image_dir=str(root), accel="tcg", cpu="max", machine="q35")
    else:
        cfg = VmConfig(image_dir=str(root))
    yield cfg
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def work() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="corral-vmjob-", dir="/tmp"))
    os.chmod(d, 0o777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def vm_request(cfg: VmConfig, job_id: int, work: Path, script: str, cpus: tuple[int, ...],
               mem_mb: int = 320, **kw: object):  # type: ignore[no-untyped-def]
    extra = {"vm": VmJob(cfg, "", mem_mb).to_text()}
    env = {"PATH": "/usr/bin:/bin", "CORRAL_VM_PINNING_FILE": str(work / f"pin-{job_id}.json")}
    return make_request(job_id, work, script, cpus=cpus, mem_mb=mem_mb, extra=extra, env=env,
                        **kw)


def pinning(work: Path, job_id: int) -> dict:  # type: ignore[type-arg]
    path = work / f"pin-{job_id}.json"
    wait_for(lambda: path.exists() and path.stat().st_size > 0, BOOT_S, "vCPU pinning")
    return json.loads(path.read_text())  # type: ignore[no-any-return]


GUEST = """#!/bin/sh
echo "kernel=$(uname -r)"
echo "boot_id=$(cat /proc/sys/kernel/random/boot_id)"
echo "nproc=$(nproc)"
echo "id=$(id -u):$(id -g)"
echo "cwd=$(pwd)"
echo "args=$*"
grep -q '^flags.* hypervisor' /proc/cpuinfo && echo hypervisor=yes
echo to-stderr >&2
echo made-in-guest > made.txt
exit 7
"""


def test_vm_job_runs_in_a_guest_as_its_user(runner: JobRunner, vm_settings: VmConfig,
                                            work: Path,
                                            test_user: tuple[str, int, int, int]) -> None:
    name, uid, gid, _ = test_user
    os.chown(work, uid, gid)
    os.chmod(work, 0o755)
    req = vm_request(vm_settings, 71, work, GUEST, cpus=(0,), user=name, uid=uid, gid=gid,
                     argv=("one", "two"), stderr=str(work / "err-%j.txt"))
    runner.launch(req)
    ex = wait_exits(runner, timeout_s=BOOT_S)[71]
    out = dict(line.split("=", 1) for line in
               (work / "slurm-71.out").read_text().splitlines() if "=" in line)
    err = (work / "err-71.txt").read_text()
    assert ex.state == "FAILED" and ex.exit_code == 7, (ex.reason, out, err)
    assert out["kernel"] != os.uname().release  # a kernel of its own
    host_boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert out["boot_id"] != host_boot and out["hypervisor"] == "yes"
    assert out["nproc"] == "1" and out["id"] == f"{uid}:{gid}"
    assert out["cwd"] == str(work) and out["args"] == "one two"
    assert (work / "err-71.txt").read_text() == "to-stderr\n"
    made = work / "made.txt"  # written through the 9p share with the user's credentials
    assert made.read_text() == "made-in-guest\n" and made.stat().st_uid == uid
    # qemu ran as the user, inside the job's cgroup, and is gone
    pin = json.loads((work / "pin-71.json").read_text())
    assert not is_alive(pin["qemu_pid"])
    assert not list(Path("/tmp").glob("corral-vm-71-*"))  # the control directory is gone


def test_vcpus_pinned_one_to_one_and_cancel_stops_the_guest(
        runner: JobRunner, vm_settings: VmConfig, work: Path) -> None:
    cpus = tuple(sorted(os.sched_getaffinity(0)))[:2]
    script = ("#!/bin/sh\ntrap 'echo got-TERM; exit 0' TERM\necho nproc=$(nproc)\n"
              "echo up > up.txt\nwhile :; do sleep 1; done\n")
    runner.launch(vm_request(vm_settings, 72, work, script, cpus=cpus))
    pin = pinning(work, 72)
    threads = {int(i): (v["thread"], v["cpu"]) for i, v in pin["vcpus"].items()}
    assert sorted(threads) == list(range(len(cpus)))
    for index, (tid, cpu) in threads.items():  # as taskset -p shows it from the host
        assert os.sched_getaffinity(tid) == {cpu} and cpu == cpus[index]
    wait_for(lambda: (work / "up.txt").exists(), BOOT_S, "the job in the guest")
    t0 = time.monotonic()
    assert runner.cancel(72, grace_s=60)
    ex = wait_exits(runner, timeout_s=60)[72]
    assert ex.state == "CANCELLED", ex
    text = (work / "slurm-72.out").read_text()
    assert f"nproc={len(cpus)}" in text
    assert "got-TERM" in text  # SIGTERM reached the job inside the guest, not qemu
    assert time.monotonic() - t0 < 50  # the guest powered off: no wait for the grace
    assert not is_alive(pin["qemu_pid"])


def test_time_limit_kills_a_guest_that_ignores_sigterm(runner: JobRunner,
                                                      vm_settings: VmConfig,
                                                      work: Path) -> None:
    core_only_under_emulation(vm_settings)
    script = "#!/bin/sh\ntrap '' TERM\necho up > up.txt\nwhile :; do sleep 1; done\n"
    runner.launch(vm_request(vm_settings, 73, work, script, cpus=(0,), kill_grace_s=1))
    pin = pinning(work, 73)
    wait_for(lambda: (work / "up.txt").exists(), BOOT_S, "the job in the guest")
    status = runner.status(73) or {}
    elapsed = time.time() - float(status.get("start_time") or time.time())
    assert runner.update_time_limit(73, int(elapsed) + 1)
    ex = wait_exits(runner, timeout_s=60)[73]
    assert ex.state == "TIMEOUT", ex
    assert "DUE TO TIME LIMIT" in (work / "slurm-73.out").read_text()
    assert not is_alive(pin["qemu_pid"])  # SIGKILL after the grace took qemu too
    assert not list(Path("/tmp").glob("corral-vm-73-*"))  # removed by the supervisor


def test_image_with_a_disk_runs_the_job_in_its_root(runner: JobRunner, vm_settings: VmConfig,
                                                   work: Path) -> None:
    """An image whose manifest names a disk: the init mounts it and runs the job there
    (its own /etc, its own files), the working directory still shared."""
    core_only_under_emulation(vm_settings)
    if shutil.which("mke2fs") is None:
        pytest.skip("mke2fs is not installed (e2fsprogs)")
    base = Path(vm_settings.image_dir)
    img = base / "disky"
    rootfs = work / "rootfs"
    for d in ("bin", "etc", "proc", "sys", "dev", "tmp"):
        (rootfs / d).mkdir(parents=True)
    shutil.copy2("/bin/busybox", rootfs / "bin" / "busybox")
    for applet in ("sh", "cat", "id", "echo"):
        (rootfs / "bin" / applet).symlink_to("busybox")
    (rootfs / "etc" / "os-release").write_text("ID=corral-disk-test\n")
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    img.mkdir()
    try:
        subprocess.run(["mke2fs", "-q", "-F", "-t", "ext4", "-d", str(rootfs),
                        str(img / "root.img"), "32M"], check=True)
        for name in ("vmlinux", "initrd.cpio"):
            os.link(base / "default" / name, img / name)
        write_manifest(str(img), Manifest(name="disky", kernel="vmlinux",
                                          initrd="initrd.cpio", disk="root.img"))
        os.chmod(img / "root.img", 0o644)
        req = vm_request(vm_settings, 74, work,
                         "#!/bin/sh\ncat /etc/os-release\necho uid=$(id -u)\n"
                         "echo from-disk > disk-job.txt\n", cpus=(0,))
        extra = {"vm": VmJob(vm_settings, "disky", 320).to_text()}
        runner.launch(dataclasses.replace(req, extra=extra))
        ex = wait_exits(runner, timeout_s=BOOT_S)[74]
        out = (work / "slurm-74.out").read_text()
        assert ex.state == "COMPLETED", (ex.reason, out)
        assert out.splitlines() == ["ID=corral-disk-test", f"uid={os.geteuid()}"]
        assert (work / "disk-job.txt").read_text() == "from-disk\n"
    finally:
        shutil.rmtree(img, ignore_errors=True)
