"""Can this node run VM jobs? (``vm`` node feature, ``corral.agent.discovery``)

Yes when ``/dev/kvm`` opens read-write for the agent, answers ``KVM_GET_API_VERSION``
with 12 (the stable API) and creates a VM (``KVM_CREATE_VM``), and qemu is installed.
A hypervisor that runs only paravirtualized guest kernels (PVM, ``kvm_pvm`` loaded
without ``kvm_intel``/``kvm_amd``: the stock Debian kernel stops in its instruction
emulator) is not enough: the reason says so, and ``vm`` is not advertised.
"""

from __future__ import annotations

import fcntl
import os
import shutil

KVM_GET_API_VERSION = 0xAE00
KVM_CREATE_VM = 0xAE01
KVM_API_VERSION = 12


def kvm_problem(dev: str = "/dev/kvm", sys_module: str = "/sys/module") -> str:
    """Why this node cannot run KVM guests, or "" when it can."""
    try:
        fd = os.open(dev, os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        return f"cannot open {dev}: {exc.strerror}"
    try:
        version = fcntl.ioctl(fd, KVM_GET_API_VERSION)
        if version != KVM_API_VERSION:
            return f"{dev} speaks KVM API {version}, not {KVM_API_VERSION}"
        vm = fcntl.ioctl(fd, KVM_CREATE_VM, 0)
        os.close(vm)
    except OSError as exc:
        return f"{dev} cannot create a VM: {exc.strerror}"
    finally:
        os.close(fd)
    mods = set(os.listdir(sys_module)) if os.path.isdir(sys_module) else set()
    if "kvm_pvm" in mods and not mods & {"kvm_intel", "kvm_amd"}:
        return ("the hypervisor is PVM (kvm_pvm without kvm_intel/kvm_amd): it runs only "
                "PVM-enabled guest kernels, and the stock kernel stops in its emulator")
    return ""


def vm_problem(qemu: str = "qemu-system-x86_64") -> str:
    """Why VM jobs cannot run here, or ""."""
    if shutil.which(qemu) is None:
        return f"{qemu} is not installed (qemu-system-x86)"
    return kvm_problem()


def vm_capable(qemu: str = "qemu-system-x86_64") -> bool:
    return not vm_problem(qemu)
