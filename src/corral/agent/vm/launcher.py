"""The process a VM job's supervisor starts in place of the job: it runs the job in a VM.

``python -m corral.agent.vm.launcher --vm JSON [--script-fd N] -- ARGV...`` runs as the
job's user, in the job's cgroup, with the job's CPU affinity, environment, working
directory and output files (the supervisor set all of that up as for any job). It

1. resolves the image (``corral.vmimage.manifest.resolve``) and writes the control
   directory (a private temporary directory: the script, what to run, the environment,
   the user record: ``corral.vmimage.guestinit``);
2. starts qemu paused (``-S``) with one vCPU per allocated CPU, asks QMP for the vCPU
   thread ids (``query-cpus-fast``), pins vCPU *i* to the *i*-th allocated CPU with
   ``sched_setaffinity``, records the pinning in ``pinning.json`` of the control
   directory (and the environment variable's file, below), and lets the guest run
   (``cont``);
3. forwards the signals it gets (the supervisor sends a VM job's signals to this
   process only: SIGTERM at cancel or time limit, ``scancel --signal``) to the job inside
   the guest over the ``corral.ctl`` port; at SIGTERM it also presses the ACPI power
   button (``system_powerdown``) for guests whose init does not read that port. The
   supervisor's SIGKILL after the kill grace takes qemu with it (same cgroup);
4. when qemu exits, ends with the guest's exit status (``rc`` in the control directory;
   ``128 + N`` becomes death by signal N, as for a host job); with no status the guest
   failed: the tail of its console goes to stderr and the exit code is 1.

``CORRAL_VM_PINNING_FILE`` (for tests and the benchmark): where to copy ``pinning.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from typing import Any

from corral.agent.vm.qemu import VmJob, guest_mem_mb, qemu_argv
from corral.agent.vm.qmp import Qmp, QmpError
from corral.vmimage.guestinit import shell_quote
from corral.vmimage.manifest import ImageError, resolve

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FORWARD = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2,
            signal.SIGQUIT, signal.SIGALRM)
_SKIP_ENV = {"PWD", "OLDPWD", "SHLVL", "_"}


def write_control(cdir: str, script: bytes | None, argv: list[str], workdir: str,
                  env: dict[str, str]) -> None:
    """The control directory's files (``guestinit`` documents them)."""
    uid, gid = os.getuid(), os.getgid()
    try:
        pw = pwd.getpwuid(uid)
        name, home = pw.pw_name, pw.pw_dir or "/"
    except KeyError:
        name, home = f"u{uid}", "/"
    if not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$", name):
        name = f"u{uid}"
    groups = [g for g in os.getgroups() if g != gid]
    with open(os.path.join(cdir, "user"), "w") as fh:
        fh.write(f"{name} {uid} {gid} {home} {' '.join(map(str, groups))}\n")
    words = list(argv)
    if script is not None:
        path = os.path.join(cdir, "job")
        with open(path, "wb") as fb:
            fb.write(script)
        os.chmod(path, 0o700)
        words = ["/corral/job"] + words
    if not words:
        raise ValueError("nothing to run")
    with open(os.path.join(cdir, "run"), "w") as fh:
        fh.write(f"WORKDIR={shell_quote(workdir)}\n")
        fh.write("set -- " + " ".join(shell_quote(w) for w in words) + "\n")
    with open(os.path.join(cdir, "env"), "w") as fh:
        for key, value in sorted(env.items()):
            if key in _SKIP_ENV or not _ENV_NAME.match(key) or "\0" in value:
                continue
            fh.write(f"export {key}={shell_quote(value)}\n")


def pin_vcpus(qmp: Qmp, cpus: list[int]) -> dict[int, tuple[int, int]]:
    """Pin vCPU i to ``cpus[i]``; {vCPU index: (thread id, host CPU)}."""
    out: dict[int, tuple[int, int]] = {}
    for index, tid in sorted(qmp.vcpu_threads().items()):
        cpu = cpus[index % len(cpus)]
        os.sched_setaffinity(tid, {cpu})
        out[index] = (tid, cpu)
    return out


class Launcher:
    def __init__(self, job: VmJob, script: bytes | None, argv: list[str],
                 control_dir: str = "") -> None:
        self.job = job
        self.script = script
        self.argv = argv
        self.given_dir = control_dir
        self.cdir = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self.qmp: Qmp | None = None
        self.ctl: socket.socket | None = None
        self.pending: list[int] = []

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.pending.append(signum)

    def forward(self) -> None:
        while self.pending:
            sig = self.pending.pop(0)
            if self.ctl is not None:
                try:
                    self.ctl.sendall(f"{sig}\n".encode())
                except OSError:
                    pass
            if sig == signal.SIGTERM and self.qmp is not None:
                try:
                    self.qmp.execute("system_powerdown")
                except QmpError:
                    pass

    def run(self) -> int:
        s = self.job.settings
        for sig in _FORWARD:
            signal.signal(sig, self._on_signal)
        try:
            image = resolve(self.job.image, s.image_dir, allow_paths=s.allow_user_images)
        except ImageError as exc:
            print(f"corral-vm: {exc}", file=sys.stderr)
            return 1
        cpus = sorted(os.sched_getaffinity(0))
        mem = guest_mem_mb(self.job.mem_mb, s.mem_overhead_mb)
        workdir = os.getcwd()
        if self.given_dir:  # the supervisor's: it removes it after the job, whatever happens
            st = os.lstat(self.given_dir)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or os.listdir(
                    self.given_dir):
                print(f"corral-vm: {self.given_dir} is not an empty directory of mine",
                      file=sys.stderr)
                return 1
            os.chmod(self.given_dir, 0o700)
            self.cdir = self.given_dir
        else:
            base = os.environ.get("TMPDIR") or "/tmp"
            if not os.path.isdir(base) or not os.access(base, os.W_OK):
                base = "/tmp"
            self.cdir = tempfile.mkdtemp(prefix="corral-vm-", dir=base)
        try:
            write_control(self.cdir, self.script, self.argv, workdir, dict(os.environ))
            jid = os.environ.get("SLURM_JOB_ID", "0")
            host = os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
            qmp_path = os.path.join(self.cdir, "qmp.sock")
            ctl_path = os.path.join(self.cdir, "ctl.sock")
            gpus = (os.environ.get("CUDA_VISIBLE_DEVICES") or "").split(",")
            vfio = tuple(s.vfio_gpus[int(g)] for g in gpus
                         if g.isdigit() and int(g) < len(s.vfio_gpus))
            argv = qemu_argv(s, image, name=f"corral-job-{jid}", vcpus=len(cpus), mem_mb=mem,
                             control_dir=self.cdir, workdir=workdir, qmp_path=qmp_path,
                             ctl_path=ctl_path, hostname=host, vfio=vfio)
            t0 = time.time()
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, close_fds=True,
                                         start_new_session=False)
            try:
                proc = self.proc
                self.qmp = Qmp(qmp_path, alive=lambda: proc.poll() is None)
                pins = pin_vcpus(self.qmp, cpus)
                self._record(pins, t0)
                self.ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.ctl.connect(ctl_path)
                self.qmp.execute("cont")
            except (QmpError, OSError) as exc:
                print(f"corral-vm: cannot start the VM: {exc}", file=sys.stderr)
                self.proc.kill()
                self.proc.wait()
                return 1
            return self.wait()
        finally:
            if self.ctl is not None:
                self.ctl.close()
            if self.qmp is not None:
                self.qmp.close()
            shutil.rmtree(self.cdir, ignore_errors=True)

    def _record(self, pins: dict[int, tuple[int, int]], t0: float) -> None:
        rec = {"qemu_pid": self.proc.pid if self.proc else 0, "started": t0,
               "vcpus": {str(i): {"thread": t, "cpu": c} for i, (t, c) in pins.items()}}
        text = json.dumps(rec)
        with open(os.path.join(self.cdir, "pinning.json"), "w") as fh:
            fh.write(text)
        dest = os.environ.get("CORRAL_VM_PINNING_FILE")
        if dest:
            try:
                with open(dest, "w") as fh:
                    fh.write(text)
            except OSError:
                pass

    def wait(self) -> int:
        assert self.proc is not None
        while True:
            self.forward()
            try:
                code = self.proc.wait(timeout=0.05)
                break
            except subprocess.TimeoutExpired:
                continue
        self.forward()
        try:
            with open(os.path.join(self.cdir, "rc")) as fh:
                rc = int(fh.read().strip())
        except (OSError, ValueError):
            tail = ""
            try:
                with open(os.path.join(self.cdir, "console.log"), errors="replace") as fh:
                    tail = fh.read()[-4000:]
            except OSError:
                pass
            print(f"corral-vm: the guest ended without an exit status (qemu exit {code})"
                  + (f"; its console:\n{tail}" if tail.strip() else ""), file=sys.stderr)
            return 1
        return rc


def main(args: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="corral-vm")
    p.add_argument("--vm", required=True, help="VmJob as JSON")
    p.add_argument("--script-fd", type=int, default=-1)
    p.add_argument("--control-dir", default="", help="an empty private directory to use")
    p.add_argument("argv", nargs="*")
    ns = p.parse_args(args)
    script = None
    if ns.script_fd >= 0:
        with os.fdopen(ns.script_fd, "rb") as fh:
            script = fh.read()
    rc = Launcher(VmJob.from_text(ns.vm), script, list(ns.argv), ns.control_dir).run()
    sys.stdout.flush()
    if 128 < rc < 128 + 65:  # the job died of a signal in the guest: so does this process
        sig = rc - 128
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
    sys.exit(rc)


if __name__ == "__main__":
    main()
