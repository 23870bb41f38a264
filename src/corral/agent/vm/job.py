"""The supervisor's hooks for a VM job (``LaunchRequest.extra["vm"]`` set by the controller).

A VM job is started like any job — in its cgroup, with its CPU affinity, as its user, with
its output files and environment — except that the process started is the VM launcher
(``corral.agent.vm.launcher``), given the script through the same memfd. Signals other
than SIGKILL/SIGSTOP/SIGCONT go to the launcher only (it forwards them into the guest):
qemu itself would end the guest at once on SIGTERM, with no grace for the job.
"""

from __future__ import annotations

import grp
import os
import shutil
import signal
import stat
import sys
import tempfile

from corral.agent.launch import LaunchRequest

KEY = "vm"
_TO_ALL = frozenset({signal.SIGKILL, signal.SIGSTOP, signal.SIGCONT})
_kvm_gid: int | None | bool = False  # False: not looked up yet


def is_vm(req: LaunchRequest) -> bool:
    return bool(req.extra.get(KEY))


def world_usable(path: str) -> bool:
    """Every user can reach and run (or read) ``path``: o+x on each directory above it
    and on the file itself (a directory: o+rx)."""
    real = os.path.realpath(path)
    parts = real.split("/")
    for i in range(2, len(parts) + 1):
        try:
            mode = os.stat("/".join(parts[:i]) or "/").st_mode
        except OSError:
            return False
        need = stat.S_IXOTH | (stat.S_IROTH if stat.S_ISDIR(mode) and i == len(parts) else 0)
        if mode & need != need:
            return False
    return True


def interpreter() -> str:
    """A Python the job's user can run: this one, else the system's python3."""
    if world_usable(sys.executable):
        return sys.executable
    for cand in ("/usr/bin/python3", shutil.which("python3") or ""):
        if cand and world_usable(cand):
            return cand
    return sys.executable


def package_root() -> str:
    """The directory holding the ``corral`` package (for the launcher's ``sys.path``)."""
    import corral

    return os.path.dirname(os.path.dirname(os.path.abspath(corral.__file__)))


def launcher_argv(req: LaunchRequest, script_fd: int, control_dir: str = "") -> list[str]:
    """The command the supervisor runs in place of the job: the launcher, as the job's
    user, under a Python that user can run (isolated from the job's PYTHON* variables;
    the launcher needs only the standard library and this package)."""
    boot = (f"import sys; sys.path.insert(0, {package_root()!r}); "
            "from corral.agent.vm.launcher import main; main()")
    argv = [interpreter(), "-I", "-c", boot, "--vm", req.extra[KEY]]
    if script_fd >= 0:
        argv += ["--script-fd", str(script_fd)]
    if control_dir:
        argv += ["--control-dir", control_dir]
    return argv + ["--", *req.argv]


def make_control_dir(req: LaunchRequest, owner: tuple[int, int] | None) -> str:
    """The VM's control directory: a fresh private directory of the job's user (``owner``
    (uid, gid) when the supervisor is root and switches user), created by the supervisor
    so that it removes it after the job, even when the launcher was killed."""
    # always /tmp (sticky): never a directory the job's environment names (TMPDIR), where
    # this root process would create what the user chose
    path = tempfile.mkdtemp(prefix=f"corral-vm-{req.job_id}-", dir="/tmp")
    if owner is not None:
        os.chown(path, owner[0], owner[1])
    return path


def remove_control_dir(path: str) -> None:
    """Remove it with everything the launcher and guest left (``rmtree`` does not follow
    symbolic links the user may have planted)."""
    if path:
        shutil.rmtree(path, ignore_errors=True)


def to_launcher_only(sig: int) -> bool:
    return sig not in _TO_ALL


def kvm_gid() -> int | None:
    """The group that may open /dev/kvm (Debian: ``kvm``), None if there is none."""
    global _kvm_gid
    if _kvm_gid is False:
        try:
            _kvm_gid = grp.getgrnam("kvm").gr_gid
        except KeyError:
            _kvm_gid = None
    return _kvm_gid if isinstance(_kvm_gid, int) and not isinstance(_kvm_gid, bool) else None
