"""Device isolation: a job cannot open the GPUs of its node that are not its own.

Policy (Slurm's ``ConstrainDevices=yes`` for GPUs): the agent knows its node's GPU device
files in index order (NVML's minor numbers, ``/dev/nvidia<minor>``, or ``[agent]
gpu_devices`` as gres.conf's ``File=``). A job allocated GPUs ``{1}`` of ``{0, 1, 2}`` gets
the device files of ``0`` and ``2`` as ``LaunchRequest.hidden_devices``; this module makes
the kernel refuse them (``open`` fails with EPERM) to every process of the job, its steps
included, whatever ``CUDA_VISIBLE_DEVICES`` says. Devices the job was given, and every
other device (``/dev/null``, the shared ``nvidiactl`` and ``nvidia-uvm``), stay open.

Mechanism, by cgroup version:

- **v1**: the job's directory in the ``devices`` hierarchy inherits its parent's
  allow-all list; each hidden device is written to ``devices.deny`` as ``c MAJ:MIN rwm``
  (``b`` for block devices). Reference: the kernel's ``cgroup-v1/devices.rst``.
- **v2** (no devices controller): an eBPF program of type ``BPF_PROG_TYPE_CGROUP_DEVICE``
  attached to the job's cgroup with ``BPF_F_ALLOW_MULTI`` (programs of the parents, e.g.
  systemd's, still run; every program must allow an access). The program reads the
  access's device type, major and minor from its context and returns 0 (deny) on a match
  with a hidden device, 1 (allow) otherwise, as runc's device filter does. It stays
  attached until the cgroup is removed.

Invariants: only the listed devices are denied (an empty list changes nothing); a device
file that does not exist or is not a device is skipped (it cannot be opened anyway); a
failure to install the filter raises ``OSError`` (the caller fails the job's isolation
rather than running it unconfined).
"""

from __future__ import annotations

import ctypes
import os
import platform
import stat
import struct

DevRule = tuple[str, int, int]  # ("c" or "b", major, minor)


def device_kind(mode: int) -> str | None:
    """``"c"`` for a character device, ``"b"`` for a block device, else None."""
    if stat.S_ISCHR(mode):
        return "c"
    if stat.S_ISBLK(mode):
        return "b"
    return None


def rules_of(paths: tuple[str, ...] | list[str]) -> list[DevRule]:
    """The (type, major, minor) of each existing device file in ``paths``."""
    out: list[DevRule] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        kind = device_kind(st.st_mode)
        if kind is None:
            continue
        rule = (kind, os.major(st.st_rdev), os.minor(st.st_rdev))
        if rule not in out:
            out.append(rule)
    return out


def deny(dirs: dict[str, str], paths: tuple[str, ...]) -> None:
    """Hide ``paths`` from the cgroup whose directories are ``dirs`` (``JobCgroup.dirs``:
    ``devices`` on v1, ``v2`` on the unified hierarchy)."""
    rules = rules_of(paths)
    if not rules:
        return
    if "devices" in dirs:
        target = os.path.join(dirs["devices"], "devices.deny")
        for kind, major, minor in rules:
            with open(target, "w") as f:
                f.write(f"{kind} {major}:{minor} rwm")
        return
    if "v2" in dirs:
        attach_filter(dirs["v2"], rules)
        return
    raise OSError("no devices cgroup and no cgroup v2 directory to hide devices in")


# ---- the eBPF device filter (cgroup v2) ----------------------------------------------------

_BPF_SYSCALL = {"x86_64": 321, "aarch64": 280, "ppc64le": 361, "s390x": 351}
_BPF_PROG_LOAD = 5
_BPF_PROG_ATTACH = 8
_BPF_PROG_TYPE_CGROUP_DEVICE = 15
_BPF_CGROUP_DEVICE = 6
_BPF_F_ALLOW_MULTI = 2
_DEV_TYPE = {"b": 1, "c": 2}  # BPF_DEVCG_DEV_BLOCK, BPF_DEVCG_DEV_CHAR


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def filter_program(rules: list[DevRule]) -> bytes:
    """The eBPF instructions: deny (return 0) the accesses to ``rules``, allow the rest.

    ``r1`` points at ``struct bpf_cgroup_dev_ctx {u32 access_type; u32 major; u32
    minor}``; the device type is the low 16 bits of ``access_type``."""
    ldx_w, and_k, jne_k, mov_k, exit_ = 0x61, 0x57, 0x55, 0xB7, 0x95
    prog = [
        _insn(ldx_w, dst=2, src=1, off=0),  # r2 = ctx->access_type
        _insn(and_k, dst=2, imm=0xFFFF),  # r2 &= 0xffff: the device type
        _insn(ldx_w, dst=3, src=1, off=4),  # r3 = ctx->major
        _insn(ldx_w, dst=4, src=1, off=8),  # r4 = ctx->minor
    ]
    for kind, major, minor in rules:
        prog += [
            _insn(jne_k, dst=2, off=4, imm=_DEV_TYPE[kind]),  # not this one: next rule
            _insn(jne_k, dst=3, off=3, imm=major),
            _insn(jne_k, dst=4, off=2, imm=minor),
            _insn(mov_k, dst=0, imm=0),  # a hidden device: deny
            _insn(exit_),
        ]
    prog += [_insn(mov_k, dst=0, imm=1), _insn(exit_)]  # anything else: allow
    return b"".join(prog)


def _bpf(cmd: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    nr = _BPF_SYSCALL.get(platform.machine())
    if nr is None:
        raise OSError(f"no bpf(2) syscall number known for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    res = int(libc.syscall(ctypes.c_long(nr), ctypes.c_int(cmd), attr,
                           ctypes.c_uint(len(attr))))
    if res < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bpf({cmd}): {os.strerror(err)}")
    return res


def attach_filter(cgroup_dir: str, rules: list[DevRule]) -> None:
    """Load ``filter_program(rules)`` and attach it to the cgroup v2 ``cgroup_dir``."""
    code = filter_program(rules)
    insns = ctypes.create_string_buffer(code, len(code))
    license_ = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(4096)
    attr = ctypes.create_string_buffer(128)
    struct.pack_into("<IIQQIIQ", attr, 0, _BPF_PROG_TYPE_CGROUP_DEVICE, len(code) // 8,
                     ctypes.addressof(insns), ctypes.addressof(license_), 1, len(log),
                     ctypes.addressof(log))
    try:
        prog_fd = _bpf(_BPF_PROG_LOAD, attr)
    except OSError as exc:
        detail = log.value.decode(errors="replace").strip()
        raise OSError(exc.errno, f"cannot load the device filter: {exc.strerror}"
                                 + (f" ({detail})" if detail else "")) from None
    try:
        cg_fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            attach = ctypes.create_string_buffer(32)
            struct.pack_into("<IIII", attach, 0, cg_fd, prog_fd, _BPF_CGROUP_DEVICE,
                             _BPF_F_ALLOW_MULTI)
            _bpf(_BPF_PROG_ATTACH, attach)
        finally:
            os.close(cg_fd)
    finally:
        os.close(prog_fd)  # the attachment keeps the program alive
