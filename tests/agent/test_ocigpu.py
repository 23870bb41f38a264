"""GPUs in OCI containers (``corral.agent.ocigpu``): the device nodes, cgroup rules,
driver library and program binds and library path a GPU job's runc spec gets, decided
from a linker cache's text and a fake device list (this machine has no GPU; the runs
with real runc are in tests/agent/test_container_jobs.py)."""

from __future__ import annotations

import copy
import os
import stat
from pathlib import Path

from corral.agent import nvbind, ocigpu
from corral.agent.container import ContainerPlan, image_env, plan
from corral.containers.spec import ContainerSpec, Mount, parse_image
from tests.agent.test_nvbind import DEVICES, LDCONFIG

# major/minor of the fake device files (the NVIDIA driver's usual numbers)
FAKE = {"/dev/nvidia0": (195, 0), "/dev/nvidia1": (195, 1), "/dev/nvidia2": (195, 2),
        "/dev/nvidiactl": (195, 255), "/dev/nvidia-modeset": (195, 254),
        "/dev/nvidia-uvm": (508, 0), "/dev/nvidia-uvm-tools": (508, 1),
        "/dev/nvidia-caps/nvidia-cap1": (511, 1)}


def fake_stat(path: str) -> os.stat_result:
    if path == "/dev/nvidia-caps":
        return os.stat_result((stat.S_IFDIR | 0o755, 0, 0, 2, 0, 0, 0, 0, 0, 0))
    if path not in FAKE:
        raise FileNotFoundError(2, "No such file or directory", path)
    major, minor = FAKE[path]
    mode = stat.S_IFCHR | (0o600 if "caps" in path else 0o666)
    return os.stat_result((mode, 0, 0, 1, 0, 0, 0, 0, 0, 0),
                          {"st_rdev": os.makedev(major, minor)})


def gpu_setup(hidden: tuple[str, ...] = ("/dev/nvidia0", "/dev/nvidia2"),
              sif: bool = False, ldconfig: str = LDCONFIG) -> ocigpu.GpuSetup:
    nv = nvbind.plan(ldconfig, DEVICES, {"nvidia-smi": "/usr/bin/nvidia-smi"}, hidden,
                     "x86_64", nvbind.LIB_DIR if sif else ocigpu.LIB_DIR)
    return ocigpu.setup(nv, ocigpu.device_nodes(nv.devices, fake_stat), sif=sif)


def container_plan(tmp_path: Path, mounts: list[Mount], image_env: list[str]) -> ContainerPlan:
    lower = tmp_path / "rootfs"
    (lower / "etc").mkdir(parents=True)
    return plan(ContainerSpec(parse_image("127.0.0.1:5000/cuda:12")), lower=str(lower),
                image_cfg={"Env": image_env}, job_id=7, restarts=0, step="batch",
                node="gpu01", jdir=str(tmp_path / "job"), runtime="/usr/sbin/runc",
                state_root=str(tmp_path / "state"), command=["/bin/sh", "-c", "true"],
                env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "0",
                     "LD_LIBRARY_PATH": "/host/only"},
                workdir=str(tmp_path), user="alice", uid=1001, gid=1001, groups=(1001,),
                cgroup_rel="corral/job_7", default_mounts=tuple(mounts))


def test_device_nodes_of_the_files_found() -> None:
    got = ocigpu.device_nodes(["/dev/nvidia1", "/dev/nvidia-caps", "/dev/gone",
                               "/dev/nvidia-caps/nvidia-cap1"], fake_stat)
    assert got == [ocigpu.DeviceNode("/dev/nvidia1", "c", 195, 1, 0o666, 0, 0),
                   ocigpu.DeviceNode("/dev/nvidia-caps/nvidia-cap1", "c", 511, 1, 0o600, 0, 0)]
    # a real file that is not a device, and a real device (this host's /dev/null)
    assert ocigpu.device_nodes(["/etc/hostname"]) == []
    [null] = ocigpu.device_nodes(["/dev/null"])
    assert (null.kind, null.major, null.minor) == ("c", 1, 3)


def test_gpu_job_spec_gets_its_devices_rules_libraries_and_path(tmp_path: Path) -> None:
    gpu = gpu_setup()
    assert [d.path for d in gpu.devices] == [
        "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-modeset", "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools", "/dev/nvidia1", "/dev/nvidiactl"]  # not 0 or 2: hidden
    assert Mount("/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                 "/usr/local/nvidia/lib64/libcuda.so.1", readonly=True) in gpu.mounts
    assert Mount("/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi", readonly=True) in gpu.mounts
    assert all(m.readonly for m in gpu.mounts) and gpu.warnings == []
    assert gpu.lib_path == "/usr/local/nvidia/lib64"
    p = container_plan(tmp_path, gpu.mounts, ["LD_LIBRARY_PATH=/usr/local/cuda/lib64"])
    ocigpu.inject(p.config, gpu)
    linux = p.config["linux"]
    assert {"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1, "fileMode": 0o666,
            "uid": 0, "gid": 0} in linux["devices"]
    assert len(linux["devices"]) == 6
    rules = linux["resources"]["devices"]
    assert rules[0] == {"allow": False, "access": "rwm"}  # deny all, then the job's own
    assert {"allow": True, "type": "c", "major": 195, "minor": 1, "access": "rwm"} in rules
    assert not [r for r in rules if r.get("minor") in (0, 2) and r.get("major") == 195]
    assert len(rules) == 7
    env = p.config["process"]["env"]
    assert "LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/cuda/lib64" in env
    assert "CUDA_VISIBLE_DEVICES=0" in env
    # the libraries and programs are binds of the plan (opened as the user, read-only)
    targets = {m.target: m for m in p.binds}
    assert targets["/usr/local/nvidia/lib64/libnvidia-ml.so.1"].readonly
    assert targets["/usr/bin/nvidia-smi"].readonly
    # no LD_LIBRARY_PATH anywhere: the directory alone; a job's own value comes after it
    env2: list[str] = []
    ocigpu.inject(q := {"process": {"env": env2}}, gpu)
    assert q["process"]["env"] == ["LD_LIBRARY_PATH=/usr/local/nvidia/lib64"]
    assert ocigpu.prepend_path("/a:/usr/local/nvidia/lib64:/b", ocigpu.LIB_DIR) == \
        "/usr/local/nvidia/lib64:/a:/b"


def test_a_step_gets_the_library_path_first(tmp_path: Path) -> None:
    gpu = gpu_setup()
    p = container_plan(tmp_path, gpu.mounts, ["LD_LIBRARY_PATH=/opt/lib"])
    p.lib_path = gpu.lib_path
    assert image_env({"LD_LIBRARY_PATH": "/host"}, p)["LD_LIBRARY_PATH"] == \
        "/usr/local/nvidia/lib64:/opt/lib"


def test_a_sif_keeps_apptainers_library_directory() -> None:
    gpu = gpu_setup(sif=True)
    assert Mount("/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                 "/.singularity.d/libs/libcuda.so.1", readonly=True) in gpu.mounts
    assert gpu.lib_path == "" and len(gpu.devices) == 6


def test_no_driver_injects_nothing(tmp_path: Path) -> None:
    gpu = gpu_setup(ldconfig="\tlibz.so.1 (libc6,x86-64) => /lib/libz.so.1\n")
    assert gpu == ocigpu.GpuSetup(warnings=[ocigpu.NO_DRIVER])
    assert ocigpu.setup(nvbind.NvBinds(), [], sif=True).warnings == [nvbind.NO_DRIVER]
    p = container_plan(tmp_path, gpu.mounts, [])
    before = copy.deepcopy(p.config)
    ocigpu.inject(p.config, gpu)
    assert p.config == before
    assert "linux" in before and "resources" not in before["linux"]


def test_this_host_has_no_driver() -> None:
    """The no-GPU path for real: this machine's discovery finds nothing to inject."""
    gpu = ocigpu.for_job((), sif=False)
    assert gpu.mounts == [] and gpu.devices == [] and gpu.warnings == [ocigpu.NO_DRIVER]
