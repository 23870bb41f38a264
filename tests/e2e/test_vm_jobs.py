"""VM jobs through a real controller and agent: ``corral submit --vm`` and a partition
whose jobs all run in VMs, beside a host job on the same node; the runtime class in the
queue, in ``corral show``, in history and ``sacct``. qemu as in tests/agent/vm (KVM where
it boots the stock kernel, else TCG)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.agent.vm.discover import kvm_problem
from corral.vmimage.build import BuildError, build_vm_image
from tests.e2e.cluster import ENTRY, TEST_CONFIG, Cluster

pytestmark = pytest.mark.slow
BOOT_S = 240.0


@pytest.fixture(scope="module")
def vm_cluster() -> Iterator[Cluster]:
    mode = os.environ.get("CORRAL_TEST_VM", "auto")
    if mode == "off" or shutil.which("qemu-system-x86_64") is None:
        pytest.skip("no qemu, or CORRAL_TEST_VM=off")
    problem = kvm_problem()
    if problem and mode == "kvm":
        pytest.skip(f"KVM unusable: {problem}")
    root = Path(tempfile.mkdtemp(prefix="corral-e2e-vm-"))
    os.chmod(root, 0o755)
    try:
        build_vm_image(str(root / "images" / "default"))
    except (BuildError, OSError) as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"cannot build the guest: {exc}")
    accel = ('accel = "tcg"\ncpu = "max"\nmachine = "q35"\n' if problem else "")
    config = TEST_CONFIG.replace("cpus = 16\nmem_mb = 8000", 'cpus = 2\nmem_mb = 4000\n'
                                 'features = ["vm"]') + f"""
[[partitions]]
name = "main"
default = true

[[partitions]]
name = "vms"
runtime = "vm"

[vm]
image_dir = "{root / 'images'}"
mem_overhead_mb = 64
{accel}"""
    c = Cluster(root, config)
    c.up()
    try:
        yield c
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


def cli(c: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CORRAL_SOCKET": str(c.sock), "CORRAL_STATE_DIR": str(c.state_dir)}
    return subprocess.run([sys.executable, "-c", ENTRY, *args], capture_output=True, text=True,
                          timeout=60, env=env, cwd=str(c.work))


def busybox_dir(root: Path) -> Path:
    """A directory image for the container job: static busybox and its applets."""
    rootfs = root / "rootfs"
    for d in ("bin", "dev", "etc", "proc", "sys", "tmp", "sbin", "usr/bin", "usr/sbin"):
        (rootfs / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2("/bin/busybox", rootfs / "bin" / "busybox")
    applets = subprocess.run(["/bin/busybox", "--list-full"], capture_output=True, text=True,
                             check=True).stdout.split()
    for rel in applets:
        dest = rootfs / rel
        if "/" in rel and dest.parent.is_dir() and not dest.exists():
            dest.symlink_to("/bin/busybox")
    return rootfs


def test_vm_job_beside_a_container_job_and_the_runtime_everywhere(vm_cluster: Cluster) -> None:
    c = vm_cluster
    if shutil.which("runc", path=f"{os.environ.get('PATH', '')}:/usr/sbin") is None:
        pytest.skip("runc is not installed (the container job's runtime)")
    rootfs = busybox_dir(c.root)
    r = cli(c, "submit", f"--container-image={rootfs}", "-c", "1", "--mem", "100", "-t", "10",
            "--parsable", "--wrap", "echo in-container; sleep 600")
    assert r.returncode == 0, r.stderr
    ctr = int(r.stdout.strip())
    c.wait_state(ctr, "RUNNING", timeout=60)
    r = cli(c, "submit", "--vm", "-c", "1", "--mem", "256", "-t", "10", "--parsable",
            "--wrap", "echo kernel=$(uname -r); echo nproc=$(nproc); exit 4")
    assert r.returncode == 0, r.stderr
    vm = int(r.stdout.strip())
    c.wait_state(vm, "RUNNING", timeout=60)
    queue = cli(c, "queue")
    assert "RUNTIME" in queue.stdout and "container" in queue.stdout and " vm " in queue.stdout
    job = c.wait_done(vm, timeout=BOOT_S)
    assert job["state"] == "FAILED" and job["exit_code"] == 4, job
    assert job["runtime"] == "vm" and job["alloc_mem_mb"] == 256 + 64
    out = (c.work / f"slurm-{vm}.out").read_text()
    assert f"kernel={os.uname().release}" not in out and "kernel=" in out
    assert "nproc=1" in out
    running = c.job(ctr)
    assert running["state"] == "RUNNING" and running["runtime"] == "container", running
    # both ran on the node at once, on different cores
    vm_cores = set(c.job(vm)["allocation"]["nodes"][0]["cores"])
    ctr_cores = set(running["allocation"]["nodes"][0]["cores"])
    assert vm_cores and ctr_cores and not vm_cores & ctr_cores
    shown = cli(c, "show", str(vm))
    assert "vm (image default)" in shown.stdout, shown.stdout
    hist = c.client.history(ids=[vm])
    assert hist[0]["runtime"] == "vm"
    c.client.cancel([ctr])
    c.wait_done(ctr, timeout=60)
    assert (c.work / f"slurm-{ctr}.out").read_text().startswith("in-container")


def test_vm_partition_runs_every_job_in_a_vm(vm_cluster: Cluster) -> None:
    if kvm_problem() and os.environ.get("CORRAL_TEST_VM", "auto") != "all":
        pytest.skip("emulated guest (KVM unusable here): a core-only run; "
                    "CORRAL_TEST_VM=all runs this test too")
    c = vm_cluster
    jid = c.submit(script="#!/bin/sh\ngrep -q '^flags.* hypervisor' /proc/cpuinfo && "
                   "echo in-a-guest\ncat /proc/sys/kernel/random/boot_id\n",
                   partitions=("vms",), mem_per_node_mb=200)
    job = c.wait_done(jid, timeout=BOOT_S)
    assert job["state"] == "COMPLETED" and job["runtime"] == "vm", job
    lines = (c.work / f"slurm-{jid}.out").read_text().splitlines()
    assert lines[0] == "in-a-guest"
    assert lines[1] != Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def test_vm_requests_refused_at_submit(vm_cluster: Cluster) -> None:
    c = vm_cluster
    r = cli(c, "submit", "--vm=/home/me/disk.qcow2", "--wrap", "true")
    assert r.returncode != 0 and "allow_user_images" in r.stderr, r.stderr
    r = cli(c, "submit", "--vm", "-N", "2", "--wrap", "true")
    assert r.returncode != 0 and "one node" in r.stderr, r.stderr


def test_srun_steps_are_refused_for_a_vm_job(vm_cluster: Cluster) -> None:
    from corral.client import CorralError

    c = vm_cluster
    jid = c.submit("sleep 600", runtime="vm", extra={"vm_image": ""})
    c.wait_state(jid, "RUNNING", timeout=60)
    with pytest.raises(CorralError, match="runs in a VM: srun steps are not supported"):
        c.client.start_step(jid, ["hostname"])
    c.client.cancel([jid])
    job = c.wait_done(jid, timeout=60)
    assert job["state"] == "CANCELLED"
