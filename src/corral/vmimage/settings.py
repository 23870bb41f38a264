"""``[vm]`` of ``corral.toml``: how VM jobs run on the nodes (``docs/vms.md``)."""

from __future__ import annotations

from dataclasses import dataclass

MACHINES = ("microvm", "q35")
ACCELS = ("kvm", "tcg")


@dataclass(frozen=True, slots=True)
class VmConfig:
    enabled: bool = True  # false: VM jobs are refused at submit time
    qemu: str = "qemu-system-x86_64"
    image_dir: str = "/var/lib/corral/images/vm"  # image cache on every node
    machine: str = "microvm"  # microvm (no firmware, no PCI) | q35, then qemu options
    accel: str = "kvm"  # kvm; tcg only for debugging (far too slow for jobs)
    cpu: str = "host"  # qemu -cpu model and flags, e.g. "host,-cx16"
    # memory a VM needs on its node besides the job's request (qemu, guest kernel): the
    # scheduler adds it to the job's memory there, the guest gets the request
    mem_overhead_mb: int = 64
    allow_user_images: bool = False  # jobs may boot a .qcow2 of their own (--vm=/path)
    debug: bool = False  # kernel messages into the guest's console log
    # PCI address of each GPU (by index) for VFIO passthrough into the job's VM, e.g.
    # "0000:3b:00.0"; the devices must be bound to vfio-pci (docs/vms.md)
    vfio_gpus: tuple[str, ...] = ()

    def problems(self) -> list[tuple[str, str]]:
        """(key, message) for every bad value."""
        out: list[tuple[str, str]] = []
        if self.machine.split(",")[0] not in MACHINES:
            out.append(("machine", f"must be one of {', '.join(MACHINES)} (then qemu machine "
                                   "options, e.g. \"microvm,pit=on\")"))
        if self.accel not in ACCELS:
            out.append(("accel", f"must be one of {', '.join(ACCELS)}"))
        if not 0 <= self.mem_overhead_mb <= 65536:
            out.append(("mem_overhead_mb", "must be 0-65536"))
        if not self.image_dir.startswith("/"):
            out.append(("image_dir", "must be an absolute path"))
        for i, addr in enumerate(self.vfio_gpus):
            if "," in addr or not addr:
                out.append((f"vfio_gpus[{i}]", f"bad PCI address {addr!r}"))
        if "," in self.image_dir:
            out.append(("image_dir", "qemu cannot use a path with a comma"))
        return out
