"""GPUs inside OCI containers (registry images, root directories and bundles run by
runc/crun, and ``srun`` steps in them): what the NVIDIA container toolkit and CDI give a
container, decided here from data so that it can be tested without a GPU.

Policy, only for a job given GPUs on this node (``LaunchRequest.gpus``); the choice of
files is ``corral.agent.nvbind``'s, the one Apptainer ``--nv`` jobs get:

- **Device nodes**: the job's own ``/dev/nvidia<N>`` (never one of the node's other GPUs,
  ``LaunchRequest.hidden_devices``) and the control devices that exist (``nvidiactl``,
  ``nvidia-uvm``, ``nvidia-uvm-tools``, ``nvidia-modeset``, ``nvidia-caps/*``). Each goes
  into the spec's ``linux.devices`` with the host file's type, major, minor, mode and
  owner (runc creates it in the container's ``/dev``, or binds it in a user namespace),
  and gets an allow rule in ``linux.resources.devices`` after a deny-all: the
  runtime's device cgroup of the container lets exactly these through (runc adds its
  defaults, ``/dev/null`` and the like); the job's own cgroup, the container's parent,
  still refuses the node's other GPUs (``corral.agent.devices``).
- **Driver libraries** (``ldconfig -p``, this word size, one per soname) are bound
  read-only at ``/usr/local/nvidia/lib64/<soname>`` (``LIB_DIR``: the directory NVIDIA's
  CUDA images already have on ``LD_LIBRARY_PATH``), and ``LIB_DIR`` is put first on the
  container's ``LD_LIBRARY_PATH`` (the image's or the job's value after it). A SIF run
  by the OCI runtime keeps Apptainer's ``/.singularity.d/libs`` (its ``99-base.sh``
  puts that on the path) and its environment rules.
- **Driver programs** (``nvidia-smi``, ...) read-only at ``/usr/bin/<name>``.
- ``srun`` steps have no OCI runtime: the step process mounts by hand
  (``corral.agent.container.enter_shared``), and binds the same device list from the
  host's ``/dev``.
- **No driver** (no library found): nothing is injected, devices included, and the job
  runs with ``NO_DRIVER`` first on its standard error.
"""

from __future__ import annotations

import os
import stat as st
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral.agent import nvbind
from corral.agent.devices import device_kind
from corral.containers.spec import Mount

LIB_DIR = "/usr/local/nvidia/lib64"
NO_DRIVER = ("corral: warning: GPUs: no NVIDIA driver libraries found on this node; the "
             "container runs without them\n")


@dataclass(frozen=True)
class DeviceNode:
    path: str  # the same inside the container as on the host
    kind: str  # "c" or "b"
    major: int
    minor: int
    mode: int  # permission bits
    uid: int
    gid: int


@dataclass
class GpuSetup:
    mounts: list[Mount] = field(default_factory=list)  # libraries and programs, read-only
    devices: list[DeviceNode] = field(default_factory=list)
    lib_path: str = ""  # put first on LD_LIBRARY_PATH ("" for a SIF: its own scripts do)
    warnings: list[str] = field(default_factory=list)


def device_nodes(paths: list[str] | tuple[str, ...],
                 stat: Callable[[str], os.stat_result] = os.stat) -> list[DeviceNode]:
    """The device nodes among ``paths`` (files that are not devices, or are gone, are
    left out)."""
    out: list[DeviceNode] = []
    for path in paths:
        try:
            s = stat(path)
        except OSError:
            continue
        kind = device_kind(s.st_mode)
        if kind is None:
            continue
        out.append(DeviceNode(path, kind, os.major(s.st_rdev), os.minor(s.st_rdev),
                              st.S_IMODE(s.st_mode), s.st_uid, s.st_gid))
    return out


def setup(nv: nvbind.NvBinds, devices: list[DeviceNode], *, sif: bool) -> GpuSetup:
    """What a GPU job's container gets from the driver files found (``nv``, chosen with
    the right library directory) and their device nodes."""
    if not nv.found:
        return GpuSetup(warnings=[nvbind.NO_DRIVER if sif else NO_DRIVER])
    mounts = [Mount(host, inside, readonly=True) for host, inside in nv.files()]
    return GpuSetup(mounts, list(devices), "" if sif else LIB_DIR)


def for_job(hidden: tuple[str, ...], *, sif: bool) -> GpuSetup:
    """``setup`` over what this node has."""
    nv = nvbind.discover(hidden, lib_dir=nvbind.LIB_DIR if sif else LIB_DIR)
    return setup(nv, device_nodes(nv.devices), sif=sif)


def prepend_path(value: str, directory: str) -> str:
    """``directory`` first on a ``:`` list (once)."""
    rest = [p for p in value.split(":") if p and p != directory]
    return ":".join([directory, *rest])


def inject(config: dict[str, Any], gpu: GpuSetup) -> None:
    """Put the device nodes, their cgroup rules and the library path into an OCI
    runtime spec (the bind mounts travel with the plan's other binds)."""
    if gpu.devices:
        linux = config.setdefault("linux", {})
        nodes = linux.setdefault("devices", [])
        rules = linux.setdefault("resources", {}).setdefault("devices", [])
        if not rules:
            rules.append({"allow": False, "access": "rwm"})
        for d in gpu.devices:
            nodes.append({"path": d.path, "type": d.kind, "major": d.major, "minor": d.minor,
                          "fileMode": d.mode, "uid": d.uid, "gid": d.gid})
            rules.append({"allow": True, "type": d.kind, "major": d.major, "minor": d.minor,
                          "access": "rwm"})
    if gpu.lib_path:
        proc = config.setdefault("process", {})
        env = [str(e) for e in proc.get("env") or []]
        for i, item in enumerate(env):
            name, sep, value = item.partition("=")
            if sep and name == "LD_LIBRARY_PATH":
                env[i] = f"LD_LIBRARY_PATH={prepend_path(value, gpu.lib_path)}"
                break
        else:
            env.append(f"LD_LIBRARY_PATH={gpu.lib_path}")
        proc["env"] = env
