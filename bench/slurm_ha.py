"""Slurm 22.05's backup controller on this machine: kill -9 of the primary slurmctld ->
the first job started by the backup, for ``bench/ha_bench.py`` (same run).

Setup (root; Debian's slurm-wlm and munge, as ``/work/shared/bench/slurm/setup.sh``):
two ``SlurmctldHost`` lines sharing one ``StateSaveLocation``. slurmctld knows which
controller it is by its host name and binds ``0.0.0.0:SlurmctldPort``, so the backup runs
in a network namespace of its own (a veth pair, 10.231.0.1 host / 10.231.0.2 backup),
with its own UTS namespace (host name ``slbk``) and a private run directory (pid file)
bind-mounted in a mount namespace. slurmd runs in the host namespace and is reached at
10.231.0.1 by both. munge's socket is a file both namespaces share.

Measured: a thread submits ``sleep 0.2`` jobs with ``sbatch`` (each job appends its id
and ``date +%s.%N`` to a file) while the primary is killed with SIGKILL; takeover =
the earliest start of a job whose id is above every id acknowledged before the kill
(only the backup can have created it) minus the kill time. The cluster is set up fresh
for every kill (a primary that comes back takes control again, which is not measured).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

NS = "corralslha"
HOST_IP, BK_IP = "10.231.0.1", "10.231.0.2"
CTL_PORT, D_PORT = 6917, 6918

CONF = """ClusterName=haanchor
SlurmctldHost={host}({host_ip})
SlurmctldHost=slbk({bk_ip})
SlurmctldPort={ctl_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation={run}/state
SlurmdSpoolDir={run}/spool/%n
SlurmctldPidFile={run}/run/slurmctld.pid
SlurmdPidFile={run}/run/slurmd-%n.pid
SlurmctldDebug=info
SlurmdDebug=info
{timeout_line}
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
MaxJobCount=100000
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=100
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
NodeName={host} NodeAddr={host_ip} Sockets=1 CoresPerSocket=16 ThreadsPerCore=1 \
  RealMemory=8000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def available() -> str | None:
    """None when Slurm can be run here, else why not."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, slurmctld as SlurmUser=root)"
    for prog in ("slurmctld", "slurmd", "munged", "sbatch", "ip", "unshare"):
        if shutil.which(prog) is None and not Path(f"/usr/sbin/{prog}").exists():
            return f"{prog} is not installed (apt-get install slurm-wlm munge iproute2)"
    return None


def _sh(*argv: str, check: bool = True, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True, **kw)


class SlurmHa:
    def __init__(self, timeout_s: int | None) -> None:
        self.run = Path(tempfile.mkdtemp(prefix="corral-slurm-ha-", dir="/var/tmp"))
        self.host = _sh("hostname", "-s").stdout.strip()
        for d in ("state", "spool", "run", "run-bk", "log", "work"):
            (self.run / d).mkdir()
        os.chmod(self.run / "work", 0o1777)
        self.conf = self.run / "slurm.conf"
        self.conf.write_text(CONF.format(
            host=self.host, host_ip=HOST_IP, bk_ip=BK_IP, ctl_port=CTL_PORT, d_port=D_PORT,
            run=self.run, timeout_line=f"SlurmctldTimeout={timeout_s}" if timeout_s else
            "# SlurmctldTimeout: the default (120 s)"))
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self.procs: list[subprocess.Popen[bytes]] = []
        self.munged: int | None = None

    def _net(self) -> None:
        _sh("ip", "netns", "del", NS, check=False)
        _sh("ip", "link", "del", "cslh0", check=False)
        _sh("ip", "netns", "add", NS)
        _sh("ip", "link", "add", "cslh0", "type", "veth", "peer", "name", "cslh1")
        _sh("ip", "link", "set", "cslh1", "netns", NS)
        _sh("ip", "addr", "add", f"{HOST_IP}/24", "dev", "cslh0")
        _sh("ip", "link", "set", "cslh0", "up")
        for cmd in (["ip", "addr", "add", f"{BK_IP}/24", "dev", "cslh1"],
                    ["ip", "link", "set", "cslh1", "up"], ["ip", "link", "set", "lo", "up"]):
            _sh("ip", "netns", "exec", NS, *cmd)

    def _munge(self) -> None:
        if _sh("sh", "-c", "munge -n | unmunge", check=False).returncode == 0:
            return  # one runs already (not ours: left alone)
        Path("/run/munge").mkdir(exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        if not Path("/etc/munge/munge.key").exists():
            raise RuntimeError("no /etc/munge/munge.key (munge's package creates it)")
        _sh("runuser", "-u", "munge", "--", "/usr/sbin/munged")
        deadline = time.monotonic() + 10
        while not Path("/run/munge/munged.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.munged = int(Path("/run/munge/munged.pid").read_text())

    def _spawn(self, argv: list[str], log: str) -> subprocess.Popen[bytes]:
        out = open(self.run / "log" / log, "ab")
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                             start_new_session=True)
        out.close()
        self.procs.append(p)
        return p

    def start(self) -> None:
        self._net()
        self._munge()
        c = str(self.conf)
        self.primary = self._spawn(["/usr/sbin/slurmctld", "-D", "-i", "-f", c, "-L",
                                    str(self.run / "log" / "ctl-primary.log")], "primary.out")
        inner = (f"mount --bind {self.run}/run-bk {self.run}/run && hostname slbk && exec "
                 f"/usr/sbin/slurmctld -D -f {c} -L {self.run}/log/ctl-backup.log")
        self.backup = self._spawn(["ip", "netns", "exec", NS, "unshare", "--uts", "--mount",
                                   "sh", "-c", inner], "backup.out")
        self._wait(lambda: "is UP" in self.ping().split("\n")[0], 30, "the primary")
        self._spawn(["/usr/sbin/slurmd", "-D", "-f", c, "-N", self.host], "slurmd.out")
        self._wait(lambda: "idle" in _sh("sinfo", "-h", "-o", "%t", env=self.env,
                                        check=False).stdout, 60, "the node")
        self._wait(lambda: self.ping().count("is UP") == 2, 60, "the backup")

    def ping(self) -> str:
        return _sh("scontrol", "ping", env=self.env, check=False).stdout

    @staticmethod
    def _wait(cond: Any, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if cond():
                return
            time.sleep(0.1)
        raise RuntimeError(f"Slurm: timed out waiting for {what}")

    def takeover(self, limit_s: float) -> float:
        """Submit, kill -9 the primary, return kill -> first job started by the backup."""
        starts = self.run / "work" / "starts"
        acked: list[tuple[float, int]] = []
        stop = threading.Event()

        def submit() -> None:
            while not stop.is_set():
                r = _sh("sbatch", "--parsable", "-o", "/dev/null", "-D",
                        str(self.run / "work"), "--wrap",
                        f'echo "$SLURM_JOB_ID $(date +%s.%N)" >> {starts}; sleep 0.2',
                        env=self.env, check=False, timeout=300)
                if r.returncode == 0 and r.stdout.strip().isdigit():
                    acked.append((time.time(), int(r.stdout.strip())))
                time.sleep(0.05)

        t = threading.Thread(target=submit, daemon=True)
        t.start()
        self._wait(lambda: len(acked) >= 10, 60, "submits")
        killed_at = time.time()
        os.kill(self.primary.pid, signal.SIGKILL)
        top = max(j for _t, j in acked)

        def first_new() -> float | None:
            if not starts.exists():
                return None
            got = [float(ts) for jid, ts in (ln.split() for ln in starts.read_text()
                                             .splitlines() if len(ln.split()) == 2)
                   if int(jid) > top]
            return min(got) if got else None
        deadline = time.monotonic() + limit_s
        found = None
        while time.monotonic() < deadline and found is None:
            found = first_new()
            time.sleep(0.1)
        stop.set()
        t.join(timeout=330)
        if found is None:
            raise RuntimeError(f"Slurm's backup started no new job within {limit_s} s")
        return found - killed_at

    def stop(self) -> None:
        _sh("scancel", "--full", "-u", "root", env=self.env, check=False)
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        if self.munged is not None:
            try:
                os.kill(self.munged, signal.SIGTERM)
            except ProcessLookupError:
                pass
        _sh("ip", "netns", "del", NS, check=False)
        _sh("ip", "link", "del", "cslh0", check=False)
        shutil.rmtree(self.run, ignore_errors=True)


def measure(timeout_s: int | None, kills: int, limit_s: float) -> dict[str, Any]:
    times: list[float] = []
    for _ in range(kills):
        s = SlurmHa(timeout_s)
        try:
            s.start()
            times.append(s.takeover(limit_s))
        finally:
            s.stop()
    return {"slurmctld_timeout_s": timeout_s or 120, "kills": kills, "seconds": times}


if __name__ == "__main__":
    import json
    import sys

    why = available()
    if why:
        raise SystemExit(f"cannot run Slurm here: {why}")
    t = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    print(json.dumps(measure(t if t else None, int(sys.argv[2]) if len(sys.argv) > 2 else 1,
                             400)))
