"""``--nv`` for Apptainer jobs: which of the host's NVIDIA driver files a GPU job's SIF
container gets, and where.

Policy (what ``apptainer exec --nv`` does, decided here from data so it can be tested
without a GPU):

- **Driver libraries**: the host's dynamic linker cache (``ldconfig -p``) is read; every
  entry of the node's own word size whose soname belongs to one of the driver's library
  families (``NV_LIBS``: ``libcuda.so``, ``libnvidia-ml.so``, ...) is bound read-only at
  ``/.singularity.d/libs/<soname>``, which the image's ``99-base.sh`` puts on
  ``LD_LIBRARY_PATH``. The first entry of a soname wins (the cache lists the preferred one
  first); 32-bit copies are left out.
- **Driver programs** (``nvidia-smi``, ...): bound read-only at ``/usr/bin/<name>``.
- **Device files**: the control devices every GPU job needs (``nvidiactl``,
  ``nvidia-uvm``, ``nvidia-uvm-tools``, ``nvidia-modeset``, ``nvidia-caps/*``) and the
  job's own GPUs, ``/dev/nvidia<N>``, never one of ``hidden`` (the node's GPUs that are
  not the job's, ``LaunchRequest.hidden_devices``). ``CUDA_VISIBLE_DEVICES`` is the
  job's, unchanged.
- **No driver** on the node (no library found): nothing is bound and the job runs, with
  one warning on its standard error (``NO_DRIVER``), as Apptainer warns and goes on.
"""

from __future__ import annotations

import glob
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass

# the driver's library families (sonames start with one of these, then ".N" or nothing)
NV_LIBS = (
    "libcuda.so", "libcudadebugger.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so",
    "libnvidia-nvvm.so", "libnvidia-fatbinaryloader.so", "libnvidia-opencl.so",
    "libnvidia-compiler.so", "libnvidia-cfg.so", "libnvidia-encode.so", "libnvcuvid.so",
    "libnvidia-fbc.so", "libnvidia-ifr.so", "libnvidia-opticalflow.so",
    "libnvidia-allocator.so", "libnvidia-gpucomp.so", "libnvidia-glcore.so",
    "libnvidia-glsi.so", "libnvidia-glvkspirv.so", "libnvidia-tls.so",
    "libnvidia-eglcore.so", "libnvidia-rtcore.so", "libnvoptix.so", "libGLX_nvidia.so",
    "libEGL_nvidia.so", "libGLESv2_nvidia.so", "libGLESv1_CM_nvidia.so",
    "libvdpau_nvidia.so", "libnvidia-pkcs11.so",
)
NV_BINS = ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced",
           "nvidia-cuda-mps-control", "nvidia-cuda-mps-server")
CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
LIB_DIR = "/.singularity.d/libs"
BIN_DIR = "/usr/bin"
NO_DRIVER = ("corral: warning: --nv: no NVIDIA driver libraries found on this node; the "
             "job runs without them\n")
_LINE = re.compile(r"^\s*(\S+)\s+\(([^)]*)\)(?:\s+OS ABI:[^=]*)?\s*=>\s*(\S.*?)\s*$")
_GPU_DEV = re.compile(r"^/dev/nvidia[0-9]+$")
# ldconfig's word-size flag of this machine's libraries
_WIDE = {"x86_64": "x86-64", "aarch64": "AArch64", "ppc64le": "64bit", "s390x": "64bit",
         "riscv64": "64bit"}


@dataclass(frozen=True)
class NvBinds:
    libs: tuple[tuple[str, str], ...] = ()  # (host path, path inside)
    bins: tuple[tuple[str, str], ...] = ()  # (host path, path inside)
    devices: tuple[str, ...] = ()  # host device files, bound at the same path

    @property
    def found(self) -> bool:
        """A driver was found (its libraries): otherwise the job gets ``NO_DRIVER``."""
        return bool(self.libs)

    def files(self) -> tuple[tuple[str, str], ...]:
        return self.libs + self.bins


def parse_ldconfig(text: str) -> list[tuple[str, str, str]]:
    """``(soname, flags, path)`` of each entry of ``ldconfig -p`` output."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            out.append((m.group(1), m.group(2), m.group(3)))
    return out


def _family(soname: str) -> bool:
    return any(soname == stem or soname.startswith(stem + ".") for stem in NV_LIBS)


def select_libs(entries: list[tuple[str, str, str]], machine: str,
                lib_dir: str = LIB_DIR) -> list[tuple[str, str]]:
    """``(host path, path inside)`` of the driver libraries among ``entries`` for a node of
    ``machine`` (``platform.machine()``): this word size only, one per soname, inside
    ``lib_dir`` (Apptainer's by default; ``corral.agent.ocigpu`` gives its own)."""
    wide = _WIDE.get(machine, "")
    seen: set[str] = set()
    out = []
    for soname, flags, path in entries:
        if not _family(soname) or soname in seen or "/" in soname:
            continue
        kinds = [f.strip() for f in flags.split(",")]
        if wide and wide not in kinds:
            continue  # a 32-bit (or other ABI) copy
        if not wide and any(k in _WIDE.values() for k in kinds):
            continue
        seen.add(soname)
        out.append((path, f"{lib_dir}/{soname}"))
    return out


def select_devices(nodes: list[str], hidden: tuple[str, ...]) -> list[str]:
    """The device files of ``nodes`` (paths under ``/dev``) the job gets: the control
    devices and capabilities, and the GPUs not in ``hidden``, sorted."""
    hide = {os.path.normpath(h) for h in hidden}
    out = []
    for node in nodes:
        path = os.path.normpath(node)
        if path in hide:
            continue
        name = path.removeprefix("/dev/")
        if name in CONTROL_DEVICES or name.startswith("nvidia-caps/") or _GPU_DEV.match(path):
            out.append(path)
    return sorted(set(out))


def plan(ldconfig_text: str, nodes: list[str], programs: dict[str, str],
         hidden: tuple[str, ...], machine: str, lib_dir: str = LIB_DIR) -> NvBinds:
    """What a GPU job's container gets, from the linker cache's text, the device files
    present, the driver programs found (name -> host path) and the hidden devices. No
    library: nothing at all (the job is told ``NO_DRIVER``)."""
    libs = select_libs(parse_ldconfig(ldconfig_text), machine, lib_dir)
    if not libs:
        return NvBinds()
    bins = [(programs[n], f"{BIN_DIR}/{n}") for n in NV_BINS if programs.get(n)]
    return NvBinds(tuple(libs), tuple(bins), tuple(select_devices(nodes, hidden)))


def _ldconfig_text() -> str:
    for prog in ("/sbin/ldconfig", "/usr/sbin/ldconfig", "/sbin/ldconfig.real"):
        if os.access(prog, os.X_OK):
            try:
                return subprocess.run([prog, "-p"], capture_output=True, text=True,
                                      timeout=10, check=False).stdout
            except (OSError, subprocess.SubprocessError):
                return ""
    return ""


def discover(hidden: tuple[str, ...], lib_dir: str = LIB_DIR) -> NvBinds:
    """This node's driver files for a GPU job (``plan`` over what the host has)."""
    nodes = glob.glob("/dev/nvidia*") + glob.glob("/dev/nvidia-caps/*")
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    programs = {n: p for n in NV_BINS if (p := shutil.which(n, path=path))}
    return plan(_ldconfig_text(), nodes, programs, hidden, platform.machine(), lib_dir)
