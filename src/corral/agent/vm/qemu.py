"""The qemu command line of a job's VM, and the settings it is built from.

``VmConfig`` (``[vm]`` of ``corral.toml``, ``corral.vmimage.settings``) travels in the
launch request (``LaunchRequest.extra["vm"]``, as JSON) with the job's image and memory.
``qemu_argv`` builds the command line:

* ``-machine microvm`` (no PCI, no firmware: the kernel's PVH entry is jumped to
  directly) or ``q35``; ``-nodefaults -no-user-config -nographic``: no devices but those
  named; ``-S``: created paused, so every vCPU thread is pinned before the guest runs.
* vCPUs = the job's allocated CPUs (one each, pinned one-to-one by the launcher), memory
  = the job's memory minus the stated overhead (``[vm] mem_overhead_mb``, which the
  scheduler adds to the job's memory on the node: the cgroup holds guest RAM and qemu).
* The control share and the working directory as virtio-9p (``security_model=none``:
  qemu runs as the job's user, so files are created with the user's own credentials);
  virtio serial ports for stdout, stderr (appended to the files the supervisor opened as
  the job's, through ``/proc/self/fd``) and signals; QMP on a Unix socket; the kernel's
  console into ``console.log`` in the control directory (only panics print: ``quiet``).
* An image disk, when there is one, as a virtio block device with ``snapshot=on`` (the
  image file is never written); GPUs by VFIO passthrough (``[vm] vfio_gpus``: PCI
  address of each GPU index) when the job has GPUs (``q35``, or microvm with PCIe).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from corral.vmimage.guestinit import PORT_CTL, PORT_ERR, PORT_OUT, SHARE_TAG, WORK_TAG
from corral.vmimage.manifest import Image
from corral.vmimage.settings import VmConfig

MIN_GUEST_MB = 64


@dataclass(frozen=True)
class VmJob:
    """What travels in ``LaunchRequest.extra["vm"]``: the node settings and the job's
    image."""

    settings: VmConfig
    image: str = ""  # the job's --vm value ("": the default image)
    mem_mb: int = 0  # the job's memory on the node, overhead included (0: none given)

    def to_text(self) -> str:
        return json.dumps({"settings": asdict(self.settings), "image": self.image,
                           "mem_mb": self.mem_mb}, sort_keys=True)

    @staticmethod
    def from_text(text: str) -> VmJob:
        data: dict[str, Any] = json.loads(text)
        raw = dict(data.get("settings") or {})
        known = set(VmConfig.__dataclass_fields__)
        raw["vfio_gpus"] = tuple(raw.get("vfio_gpus") or ())
        settings = VmConfig(**{k: v for k, v in raw.items() if k in known})
        return VmJob(settings, str(data.get("image") or ""), int(data.get("mem_mb") or 0))


def guest_mem_mb(job_mem_mb: int, overhead_mb: int, default_mb: int = 512) -> int:
    """Guest RAM: the job's memory on the node less the overhead the scheduler added."""
    if job_mem_mb <= 0:
        return default_mb
    return max(MIN_GUEST_MB, job_mem_mb - overhead_mb)


def kernel_cmdline(image: Image, hostname: str, debug: bool) -> str:
    words = ["console=ttyS0", "panic=-1", "reboot=t", "rdinit=/init",
             "random.trust_cpu=on", "tsc=reliable", "no_timer_check", "i8042.noaux",
             "i8042.nokbd", "i8042.nopnp", "8250.nr_uarts=1", f"corral.hostname={hostname}"]
    if not debug:
        words += ["quiet", "loglevel=1"]
    if image.disk:
        words.append("corral.root=/dev/vda")
    if image.cmdline:
        words.append(image.cmdline)
    return " ".join(words)


def qemu_argv(s: VmConfig, image: Image, *, name: str, vcpus: int, mem_mb: int,
              control_dir: str, workdir: str, qmp_path: str, ctl_path: str, hostname: str,
              vfio: tuple[str, ...] = ()) -> list[str]:
    if vcpus < 1:
        raise ValueError("a VM needs at least one vCPU")
    micro = s.machine.split(",")[0] == "microvm"
    dev = "device" if micro else "pci"
    machine = s.machine  # the type, then any qemu machine options ("microvm,pit=on")
    if micro and vfio:
        machine += ",pcie=on"
    for path in (control_dir, workdir):
        if "," in path:
            raise ValueError(f"qemu cannot share a path with a comma: {path!r}")
    argv = [s.qemu, "-name", name, "-machine", machine, "-accel", s.accel, "-cpu", s.cpu,
            "-smp", str(vcpus), "-m", f"{mem_mb}M", "-nodefaults", "-no-user-config",
            "-nographic", "-no-reboot", "-S",
            "-kernel", image.kernel, "-append", kernel_cmdline(image, hostname, s.debug),
            "-serial", f"file:{control_dir}/console.log",
            "-qmp", f"unix:{qmp_path},server=on,wait=off",
            "-fsdev", f"local,id=ctl9p,path={control_dir},security_model=none",
            "-device", f"virtio-9p-{dev},fsdev=ctl9p,mount_tag={SHARE_TAG}",
            "-fsdev", f"local,id=work9p,path={workdir},security_model=none",
            "-device", f"virtio-9p-{dev},fsdev=work9p,mount_tag={WORK_TAG}",
            "-device", f"virtio-serial-{dev},max_ports=4",
            "-chardev", "file,id=out,path=/proc/self/fd/1,append=on",
            "-device", f"virtserialport,chardev=out,name={PORT_OUT}",
            "-chardev", "file,id=err,path=/proc/self/fd/2,append=on",
            "-device", f"virtserialport,chardev=err,name={PORT_ERR}",
            "-chardev", f"socket,id=ctl,path={ctl_path},server=on,wait=off",
            "-device", f"virtserialport,chardev=ctl,name={PORT_CTL}"]
    if image.initrd:
        argv += ["-initrd", image.initrd]
    if image.disk:
        fmt = "qcow2" if image.disk.endswith(".qcow2") else "raw"
        argv += ["-drive", f"if=none,id=root,file={image.disk},format={fmt},snapshot=on",
                 "-device", f"virtio-blk-{dev},drive=root"]
    for addr in vfio:
        argv += ["-device", f"vfio-pci,host={addr}"]
    return argv
