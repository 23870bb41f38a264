"""Four nodes each side: Corral (a controller + four agents n1..n4) against Slurm 22.05's
``multi`` profile (four slurmd n1..n4), on this machine, in the same run.

Sections:

a) step launch: one ``sbatch -N4`` job whose script runs ``srun -N4 -n4 true`` STEPS times
   (after WARMUP untimed steps), each call timed with bash ``$EPOCHREALTIME`` around it (no
   extra fork); median and p99 of the call's wall time.
b) ``sbatch -N4 --ntasks-per-node=1`` of an Open MPI hello (``mpicc.openmpi``; the script
   runs ``mpirun.openmpi --mca pml ob1 --mca btl tcp,self``, which starts its ``orted``
   daemons on the other nodes with the system's own ``srun``: Corral's shim or Slurm's.
   The TCP transport and the ``ob1`` layer that drives it are named outright, as a site
   without InfiniBand sets them, so that no rank spends 0.2 s trying UCX first), REPS times, one
   after the other: submit (``sbatch`` invoked) -> the job has ended for the workload
   manager. The script's last line writes ``$EPOCHREALTIME`` to its output (the file is
   polled every 2 ms, the job's state only once a second meanwhile, so that no stream of
   ``squeue`` processes loads Slurm); from then the job's state is polled every 20 ms
   (Corral: the client over the Unix socket; Slurm: ``squeue -h -t all -j ID -o %T``)
   until it is no longer pending/running/completing. ``sbatch --wait`` is not used:
   both implementations poll (Corral's shim every 0.5 s, Slurm 22.05's after 2 s, then
   8 s, ...), which would measure their poll intervals. The parts (submit -> script
   start, mpirun, script end -> ended) are reported too.
c) CPU per step, during section (a)'s timed loop (the script waits for the benchmark
   between warm-up, loop and end, so the counters are read with the job alive and idle):
   each node's processes are in a cgroup2 directory of this benchmark (the
   controller-less ``/sys/fs/cgroup/unified`` here, ``cpu.stat`` ``usage_usec``), which
   their children inherit: Slurm: the slurmd (moved there after start-up) and every
   slurmstepd it forks with their tasks (task/none, proctrack/linuxproc: Slurm moves
   nothing); Corral: the agent (moved there at once), its fork server and the job's
   supervisors, plus the node's job cgroups (``<unified>/mnbench/<node>``, where Corral
   puts the batch script, the step processes and their tasks). After the loop the
   benchmark waits until each node's cgroup is back to the processes it had before (the
   step daemons have exited). On n1 this includes the batch script and its ``srun``
   processes: their CPU (bash ``times``, children) is reported apart as "srun client".
   The controllers (slurmctld, Corral's controller) and munged: ``/proc/<pid>/stat``.

``--rounds R`` runs both sides R times, alternating which goes first; the tables then show
the median over the rounds of each figure (each round's own medians are listed too).

Run (root; about 3 minutes a round with Slurm):
``.venv/bin/python bench/multinode_bench.py --rounds 3``; ``--skip-slurm`` for Corral
alone; ``--render-only`` rewrites the Markdown from the JSON.
Results: ``bench/results/multinode_bench.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
SLURM_DIR = ROOT.parent / "shared" / "bench" / "slurm"
SLURM_RUN = Path("/var/tmp/slurm-anchor")
SLURM_CONF = SLURM_RUN / "slurm.conf"
RESULTS = ROOT / "bench" / "results"
ENTRY = "from corral.cli.main import main; main()"
NODES = ("n1", "n2", "n3", "n4")
UNIFIED = Path("/sys/fs/cgroup/unified")
CGROUP_ROOT = "mnbench"  # Corral agents' cgroup_root (job cgroups: <unified>/mnbench/<node>)
ENDED = ("PENDING", "RUNNING", "COMPLETING", "SUSPENDED", "CONFIGURING", "REQUEUED",
         "RESIZING", "SIGNALING", "STAGE_OUT")

CORRAL_CONFIG = f"""
[agent]
cgroup_root = "{CGROUP_ROOT}"
""" + "".join(f"""
[[nodes]]
name = "{n}"
cpus = 16
mem_mb = 4000
""" for n in NODES) + f"""
[[partitions]]
name = "debug"
nodes = "{','.join(NODES)}"
default = true

[scheduler]
default_mem_per_cpu_mb = 100
"""

STEP_SCRIPT = """#!/bin/bash
D={d}
wait_for() {{ while [ ! -e "$D/$1" ]; do sleep 0.005; done; }}
for ((i = 0; i < {warmup}; i++)); do srun -N4 -n4 true || echo "warmup $i rc=$?" >> $D/fail; done
times > $D/times0
touch $D/ready
wait_for go
L=()
for ((i = 0; i < {steps}; i++)); do
  a=$EPOCHREALTIME
  srun -N4 -n4 true || echo "step $i rc=$?" >> $D/fail
  b=$EPOCHREALTIME
  L+=("$a $b")
done
times > $D/times1
printf '%s\\n' "${{L[@]}}" > $D/lat
touch $D/done
wait_for fin
"""

MPI_SOURCE = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int rank, size, one = 1, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    const char *node = getenv("SLURMD_NODENAME");
    printf("hello rank %d of %d on %s sum %d\n", rank, size, node ? node : "?", sum);
    MPI_Finalize();
    return 0;
}
"""

MPI_SCRIPT = """#!/bin/bash
echo "start $EPOCHREALTIME"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun.openmpi --mca pml ob1 --mca btl tcp,self {exe}
echo "rc=$? end $EPOCHREALTIME"
"""


# ---- small helpers --------------------------------------------------------------------------

def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    k = (len(s) - 1) * p / 100.0
    f = int(k)
    c = min(f + 1, len(s) - 1)
    return s[f] + (s[c] - s[f]) * (k - f)


def summary(xs: list[float]) -> dict[str, float]:
    return {"n": len(xs), "p50": pct(xs, 50), "p90": pct(xs, 90), "p99": pct(xs, 99),
            "min": min(xs) if xs else float("nan"), "max": max(xs) if xs else float("nan"),
            "mean": statistics.mean(xs) if xs else float("nan")}


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


_HZ = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of one process (0 if it is gone)."""
    if not pid:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _HZ


def machine_cpu_s() -> float:
    vals = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(vals) - vals[3] - vals[4]) / _HZ


def cgroup_cpu_s(path: Path) -> float:
    try:
        for line in (path / "cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
    except OSError:
        pass
    return 0.0


def cgroup_procs(path: Path) -> int:
    """Processes in a cgroup and its descendants."""
    n = 0
    for d, _subs, files in os.walk(path):
        if "cgroup.procs" in files:
            try:
                n += len(Path(d, "cgroup.procs").read_text().split())
            except OSError:
                pass
    return n


def rm_cgroup_tree(path: Path) -> None:
    if not path.exists():
        return
    for d, _subs, _files in sorted(os.walk(path), key=lambda t: -len(t[0])):
        try:
            os.rmdir(d)
        except OSError:
            pass


def wait_until(pred: Callable[[], Any], timeout_s: float, what: str,
               interval: float = 0.002) -> Any:
    end = time.monotonic() + timeout_s
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > end:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval)


def wait_file_or_end(side: "Side", job_id: int, cond: Callable[[], bool], timeout_s: float,
                     what: str, interval: float) -> bool:
    """Poll ``cond`` (a file test, cheap) every ``interval`` s; ask the workload manager
    whether the job has ended only once a second (a ``squeue`` process is no cheap poll).
    True when ``cond`` held, False when the job ended first."""
    end = time.monotonic() + timeout_s
    next_state = time.monotonic() + 1.0
    while True:
        if cond():
            return True
        now = time.monotonic()
        if now >= next_state:
            if side.state(job_id) not in ENDED:
                return bool(cond())
            next_state = now + 1.0
        if now > end:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval)


def parse_times(path: Path) -> float:
    """CPU seconds of the children (user + system) from bash ``times`` output."""
    def sec(tok: str) -> float:
        m, s = tok.rstrip("s").split("m")
        return int(m) * 60 + float(s)
    lines = path.read_text().split("\n")
    u, s = lines[1].split()
    return sec(u) + sec(s)


class NodeMeters:
    """One cgroup2 directory per node under ``<unified>/mnbench-<pid>-<side>``."""

    def __init__(self, side: str) -> None:
        if not (UNIFIED / "cgroup.procs").exists() or not (UNIFIED / "cpu.stat").exists():
            raise RuntimeError(f"{UNIFIED} (cgroup2 with cpu.stat) is needed for section (c)")
        self.base = UNIFIED / f"mnbench-{os.getpid()}-{side}"
        self.dirs = {n: self.base / n for n in NODES}
        for d in self.dirs.values():
            d.mkdir(parents=True, exist_ok=True)

    def add(self, node: str, pid: int) -> None:
        (self.dirs[node] / "cgroup.procs").write_text(str(pid))

    def close(self) -> None:
        # anything still inside (should be nothing) goes back to the root cgroup first
        for d in self.dirs.values():
            try:
                for pid in (d / "cgroup.procs").read_text().split():
                    try:
                        (UNIFIED / "cgroup.procs").write_text(pid)
                    except OSError:
                        pass
            except OSError:
                pass
        rm_cgroup_tree(self.base)


# ---- the two systems --------------------------------------------------------------------

class Side:
    """What both clusters offer to the sections."""

    name = ""
    env: dict[str, str]
    meters: NodeMeters
    ctl_pid: int | None = None

    def node_cpu_s(self) -> dict[str, float]:
        raise NotImplementedError

    def node_procs(self) -> dict[str, int]:
        raise NotImplementedError

    def daemon_pids(self) -> dict[str, int | None]:
        raise NotImplementedError

    def state(self, job_id: int) -> str:
        raise NotImplementedError

    def sbatch(self, script: Path, out: Path, *args: str) -> int:
        r = subprocess.run(["sbatch", "--parsable", "-N4", "-t", "10", "-o", str(out), *args,
                            str(script)], capture_output=True, text=True, env=self.env,
                           cwd=script.parent, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"{self.name}: sbatch failed ({r.returncode}): "
                               f"{r.stderr.strip()[:800]}")
        return int(r.stdout.strip().split(";")[0])

    def wait_ended(self, job_id: int, timeout_s: float, interval: float = 0.02) -> str:
        def ended() -> str | None:
            st = self.state(job_id)
            return st if st and st not in ENDED else None
        return str(wait_until(ended, timeout_s, f"{self.name} job {job_id} to end", interval))

    def cancel(self, job_id: int) -> None:
        subprocess.run(["scancel", str(job_id)], env=self.env, capture_output=True, timeout=30)

    def logs(self) -> str:
        return ""


class SlurmSide(Side):
    name = "Slurm"

    def __init__(self) -> None:
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("CORRAL_", "SLURM_", "SQUEUE_", "SBATCH_", "SRUN_"))}
        self.env["SLURM_CONF"] = str(SLURM_CONF)
        self.meters: NodeMeters = None  # type: ignore[assignment]  # set by up()
        self.pids: dict[str, int] = {}

    def up(self) -> None:
        if not (SLURM_DIR / "setup.sh").exists():
            raise RuntimeError(f"Slurm cannot be set up: {SLURM_DIR}/setup.sh is missing")
        if os.geteuid() != 0:
            raise RuntimeError("Slurm cannot be set up: setup.sh needs root (or --skip-slurm)")
        r = subprocess.run([str(SLURM_DIR / "setup.sh"), "multi"], capture_output=True,
                           text=True, timeout=900)
        if r.returncode != 0:
            raise RuntimeError(f"Slurm cannot be set up: setup.sh multi exited {r.returncode}:"
                               f"\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
        for n in NODES:
            self.pids[n] = int((SLURM_RUN / "run" / f"slurmd-{n}.pid").read_text().split()[0])
        self.ctl_pid = int((SLURM_RUN / "run" / "slurmctld.pid").read_text().split()[0])
        self.meters = NodeMeters("slurm")
        for n in NODES:
            self.meters.add(n, self.pids[n])

        def idle() -> bool:
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True,
                                 text=True, env=self.env).stdout.split()
            return out.count("idle") == 4
        wait_until(idle, 60, "four idle Slurm nodes", 0.2)

    def down(self) -> None:
        subprocess.run([str(SLURM_DIR / "stop.sh")], capture_output=True, text=True,
                       timeout=120)
        if self.meters is not None:
            self.meters.close()

    def version(self) -> str:
        return subprocess.run(["sinfo", "-V"], capture_output=True, text=True,
                              env=self.env).stdout.strip()

    def node_cpu_s(self) -> dict[str, float]:
        return {n: cgroup_cpu_s(d) for n, d in self.meters.dirs.items()}

    def node_procs(self) -> dict[str, int]:
        return {n: cgroup_procs(d) for n, d in self.meters.dirs.items()}

    def daemon_pids(self) -> dict[str, int | None]:
        munged = SLURM_RUN / "run" / "munged.pid"
        m = int(munged.read_text().split()[0]) if munged.exists() else None
        if m is None and Path("/run/munge/munged.pid").exists():
            m = int(Path("/run/munge/munged.pid").read_text().split()[0])
        out: dict[str, int | None] = {"slurmctld": self.ctl_pid, "munged": m}
        out.update({f"slurmd {n} (process alone)": p for n, p in self.pids.items()})
        return out

    def state(self, job_id: int) -> str:
        r = subprocess.run(["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%T"],
                           capture_output=True, text=True, env=self.env, timeout=30)
        return r.stdout.strip()

    def logs(self) -> str:
        out = []
        for f in sorted((SLURM_RUN / "log").glob("*.log")):
            out.append(f"--- {f}\n{f.read_text(errors='replace')[-2000:]}")
        return "\n".join(out)


class CorralSide(Side):
    name = "Corral"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.state_dir = root / "state"
        self.state_dir.mkdir(parents=True)
        self.cfg = root / "corral.toml"
        self.cfg.write_text(CORRAL_CONFIG)
        self.bin = root / "bin"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CORRAL_", "SLURM_", "SQUEUE_", "SBATCH_", "SRUN_"))}
        self.env = dict(env, CORRAL_STATE_DIR=str(self.state_dir),
                        PATH=f"{self.bin}:{env['PATH']}")
        self.meters: NodeMeters = None  # type: ignore[assignment]  # set by up()
        self.client: Any = None

    def _start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{name}.log", "ab")
        p = subprocess.Popen([sys.executable, "-c", ENTRY, *args], stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True,
                             env={k: v for k, v in self.env.items() if k != "CORRAL_STATE_DIR"})
        log.close()
        self.procs[name] = p
        return p

    def up(self) -> None:
        from corral.client import Client

        self.meters = NodeMeters("corral")
        ctl = self._start("controller", "controller", "--state-dir", str(self.state_dir),
                          "--config", str(self.cfg))
        self.ctl_pid = ctl.pid
        wait_until(lambda: (self.state_dir / "cluster.key").exists()
                   and (self.state_dir / "corral.sock").exists(), 60, "Corral's controller",
                   0.02)
        for n in NODES:
            p = self._start(n, "agent", "--controller", f"unix:{self.state_dir}/corral.sock",
                            "--key-file", str(self.state_dir / "cluster.key"), "--state-dir",
                            str(self.root / f"agent-{n}"), "--name", n, "--config",
                            str(self.cfg))
            self.meters.add(n, p.pid)  # before it starts its fork server
        r = subprocess.run([sys.executable, "-c", ENTRY, "shims", "install", "--force",
                            str(self.bin)],
                           capture_output=True, text=True, env=self.env, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"corral shims install failed: {r.stderr}")
        self.client = Client(socket_path=str(self.state_dir / "corral.sock"))
        wait_until(lambda: sorted(x["name"] for x in self.client.nodes()
                                  if x["state"] in ("IDLE", "MIXED", "ALLOCATED"))
                   == list(NODES), 60, "four Corral agents", 0.05)

    def down(self) -> None:
        if self.client is not None:
            try:
                self.client.close()
            except Exception:  # noqa: BLE001
                pass
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for sup in self.root.glob("agent-*/jobs/*/status.json"):
            try:
                os.kill(int(json.loads(sup.read_text())["supervisor_pid"]), signal.SIGKILL)
            except (OSError, ValueError, KeyError):
                pass
        if self.meters is not None:
            self.meters.close()
        # the agents' (now empty) job cgroup parents, in every hierarchy they prepared
        for mnt in [UNIFIED, *Path("/sys/fs/cgroup").iterdir()]:
            rm_cgroup_tree(mnt / CGROUP_ROOT)

    def version(self) -> str:
        import importlib.metadata

        r = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %cs"],
                           capture_output=True, text=True)
        return f"{importlib.metadata.version('corral')} (commit {r.stdout.strip()})"

    def node_cpu_s(self) -> dict[str, float]:
        return {n: cgroup_cpu_s(d) + cgroup_cpu_s(UNIFIED / CGROUP_ROOT / n)
                for n, d in self.meters.dirs.items()}

    def node_procs(self) -> dict[str, int]:
        return {n: cgroup_procs(d) + cgroup_procs(UNIFIED / CGROUP_ROOT / n)
                for n, d in self.meters.dirs.items()}

    def daemon_pids(self) -> dict[str, int | None]:
        out: dict[str, int | None] = {"controller": self.ctl_pid}
        out.update({f"agent {n} (process alone)": self.procs[n].pid for n in NODES})
        return out

    def state(self, job_id: int) -> str:
        return str(self.client.job(job_id).get("state", ""))

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted(self.root.glob("*.log")))


# ---- sections -------------------------------------------------------------------------------

def steps_section(side: Side, work: Path, steps: int, warmup: int) -> dict[str, Any]:
    d = work / f"steps-{side.name.lower()}"
    d.mkdir()
    script = d / "steps.sh"
    script.write_text(STEP_SCRIPT.format(d=d, steps=steps, warmup=warmup))
    script.chmod(0o755)
    jid = side.sbatch(script, d / "job.out")
    try:
        wait_file_or_end(side, jid, lambda: (d / "ready").exists() or (d / "fail").exists(),
                         120 + 5 * warmup, f"{side.name}: the step job's warm-up", 0.01)
        if not (d / "ready").exists():
            raise RuntimeError(f"{side.name}: step job {jid} failed in warm-up: "
                               f"{_read(d / 'fail')}{_read(d / 'job.out')[-2000:]}")
        procs0 = side.node_procs()
        pids = side.daemon_pids()
        load = loadavg()
        c0 = (side.node_cpu_s(), {k: proc_cpu_s(p) for k, p in pids.items()}, machine_cpu_s())
        t0 = time.perf_counter()
        (d / "go").touch()
        wait_file_or_end(side, jid, lambda: (d / "done").exists(), 60 + 10 * steps,
                         f"{side.name}: {steps} steps", 0.005)
        t1 = time.perf_counter()
        if not (d / "done").exists():
            raise RuntimeError(f"{side.name}: step job {jid} ended early: "
                               f"{_read(d / 'job.out')[-2000:]}")
        # the step daemons of the last steps exit: each node back to its processes before
        settled = True
        try:
            wait_until(lambda: all(v <= procs0[k] for k, v in side.node_procs().items()), 20,
                       "step processes to exit", 0.005)
        except TimeoutError:
            settled = False
        c1 = (side.node_cpu_s(), {k: proc_cpu_s(p) for k, p in pids.items()}, machine_cpu_s())
        t2 = time.perf_counter()
        (d / "fin").touch()
        final = side.wait_ended(jid, 60)
    except BaseException:
        side.cancel(jid)
        raise
    lat = []
    for line in (d / "lat").read_text().split("\n"):
        if line.strip():
            a, b = line.split()
            lat.append(float(b) - float(a))
    client = parse_times(d / "times1") - parse_times(d / "times0")
    node = {n: c1[0][n] - c0[0][n] for n in NODES}
    cpu_ms = {f"node {n}" + (" (incl. batch script + srun client)" if n == "n1" else ""):
              1000 * v / steps for n, v in node.items()}
    cpu_ms["srun client (bash times, in n1)"] = 1000 * client / steps
    cpu_ms["n1 without the srun client"] = 1000 * (node["n1"] - client) / steps
    for k in pids:
        cpu_ms[k] = 1000 * (c1[1][k] - c0[1][k]) / steps
    cpu_ms["whole machine (busy, all processes)"] = 1000 * (c1[2] - c0[2]) / steps
    nodes_total = sum(node.values())
    cpu_ms["four nodes, total"] = 1000 * nodes_total / steps
    cpu_ms["four nodes without the srun client"] = 1000 * (nodes_total - client) / steps
    return {"job_id": jid, "final_state": final, "steps": steps, "warmup": warmup,
            "loadavg": load, "loop_s": t1 - t0, "settle_s": t2 - t1, "settled": settled,
            "failures": _read(d / "fail"), "srun_call_s": summary(lat),
            "cpu_ms_per_step": {k: round(v, 3) for k, v in cpu_ms.items()}}


def _has_end(path: Path) -> bool:
    return " end " in _read(path)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def build_mpi(work: Path) -> Path:
    cc = shutil.which("mpicc.openmpi")
    if cc is None or shutil.which("mpirun.openmpi") is None:
        raise RuntimeError("mpicc.openmpi / mpirun.openmpi not found (Debian: libopenmpi-dev, "
                           "openmpi-bin)")
    src = work / "mpihello.c"
    src.write_text(MPI_SOURCE)
    exe = work / "mpihello"
    r = subprocess.run([cc, "-O2", "-o", str(exe), str(src)], capture_output=True, text=True,
                       timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"mpicc.openmpi failed: {r.stderr[-1500:]}")
    return exe


def mpi_section(side: Side, work: Path, exe: Path, reps: int) -> dict[str, Any]:
    d = work / f"mpi-{side.name.lower()}"
    d.mkdir()
    script = d / "mpi.sh"
    script.write_text(MPI_SCRIPT.format(exe=exe))
    script.chmod(0o755)
    total, to_start, run, to_end, seen = [], [], [], [], []
    loads = []
    bad: list[str] = []
    for i in range(reps):
        out = d / f"mpi-{i}.out"
        loads.append(loadavg())
        t0 = time.time()
        jid = side.sbatch(script, out, "--ntasks-per-node=1")
        try:
            wait_file_or_end(side, jid, partial(_has_end, out), 180,
                             f"{side.name}: MPI job {jid}", 0.002)
            t_seen = time.time()
            state = side.wait_ended(jid, 60)
        except BaseException:
            side.cancel(jid)
            raise
        t1 = time.time()
        text = _read(out)
        ranks = sorted(ln for ln in text.splitlines() if ln.startswith("hello rank"))
        nodes = {ln.split()[-3] for ln in ranks}
        ok = (state == "COMPLETED" and len(ranks) == 4 and nodes == set(NODES)
              and "rc=0 end" in text and all(ln.endswith("sum 4") for ln in ranks))
        if not ok:
            bad.append(f"rep {i} job {jid}: state {state}\n{text[-1500:]}")
            continue
        start = float(next(ln for ln in text.splitlines() if ln.startswith("start")).split()[1])
        end = float(next(ln for ln in text.splitlines() if " end " in ln).split()[-1])
        total.append(t1 - t0)
        to_start.append(start - t0)
        run.append(end - start)
        to_end.append(t1 - end)
        seen.append(t_seen - end)
    return {"reps": reps, "ok": len(total), "failures": bad[:3], "loadavg_per_rep": loads,
            "submit_to_ended_s": summary(total), "submit_to_script_start_s": summary(to_start),
            "mpirun_s": summary(run), "script_end_to_ended_s": summary(to_end),
            "script_end_to_seen_s": summary(seen)}


# ---- report ---------------------------------------------------------------------------------

def render_md(res: dict[str, Any]) -> str:
    co, sl = res.get("corral") or {}, res.get("slurm") or {}
    lines = [
        "# Four nodes: Corral (controller + 4 agents) vs Slurm 22.05 (4 slurmd), same machine,"
        " same run",
        "",
        f"Run {res['when']} on {res['machine']} ({res['cpus']} CPUs, shared): Python "
        f"{res['python']}, {res.get('slurm_version') or 'Slurm not run'}, Corral "
        f"{res.get('corral_version', '?')}. Command: `{res['command']}`.",
        f"Load average at start {res['loadavg_start']}, at the end {res.get('loadavg_end', '?')}"
        "; per section below. " + ("Slurm ran first (`setup.sh multi`, stopped afterwards), "
                                   "then Corral" if len(res.get("rounds") or []) < 2 else
                                   "Slurm (`setup.sh multi`, stopped afterwards) and Corral "
                                   "took turns, fresh clusters each round")
        + "; both clusters have four nodes n1..n4 × 16 CPUs on this one host.",
        "",
        "| metric | Corral | Slurm 22.05 | Corral / Slurm |",
        "|---|---|---|---|",
    ]

    def get(d: dict[str, Any], *path: str) -> float | None:
        for p in path:
            if not isinstance(d, dict) or p not in d:
                return None
            d = d[p]
        return float(d) if isinstance(d, (int, float)) else None

    def row(name: str, path: tuple[str, ...], scale: float = 1000.0, fmt: str = "{:.1f}") -> None:
        c, s = get(co, *path), get(sl, *path)
        cs = fmt.format(c * scale) if c is not None else "—"
        ss = fmt.format(s * scale) if s is not None else "—"
        r = f"{c / s:.2f}" if c is not None and s else "—"
        lines.append(f"| {name} | {cs} | {ss} | {r} |")

    st = (co.get("steps") or sl.get("steps") or {})
    n_steps = st.get("steps", "?")
    row(f"(a) `srun -N4 -n4 true` in an allocation, median (ms), {n_steps} calls",
        ("steps", "srun_call_s", "p50"))
    row("(a) same, p99 (ms)", ("steps", "srun_call_s", "p99"))
    row("(a) same, min (ms)", ("steps", "srun_call_s", "min"))
    mp = (co.get("mpi") or sl.get("mpi") or {})
    row(f"(b) `sbatch -N4` Open MPI hello, submit -> ended, median (ms), {mp.get('ok', '?')} "
        "jobs", ("mpi", "submit_to_ended_s", "p50"))
    row("(b) same, p99 (ms)", ("mpi", "submit_to_ended_s", "p99"))
    row("(b) part: submit -> batch script starts, median (ms)",
        ("mpi", "submit_to_script_start_s", "p50"))
    row("(b) part: `mpirun.openmpi` (4 ranks, 4 nodes), median (ms)", ("mpi", "mpirun_s", "p50"))
    row("(b) part: script's last line -> ended as seen by a 20 ms poll, median (ms)",
        ("mpi", "script_end_to_ended_s", "p50"))

    def verdict(path: tuple[str, ...], label: str) -> str:
        c, s = get(co, *path), get(sl, *path)
        if c is None or not s:
            return f"{label}: not measured on both sides"
        ok = c <= s / 5.0
        return (f"{label}: Corral {c * 1000:.1f} ms vs Slurm {s * 1000:.1f} ms = "
                f"{c / s:.2f} of Slurm's time (target ≤ 0.20): **{'met' if ok else 'NOT met'}**")

    lines += ["", "Target of the project: Corral ≤ 1/5 of Slurm's time on (a) and (b).", "",
              "- " + verdict(("steps", "srun_call_s", "p50"), "(a) median"),
              "- " + verdict(("mpi", "submit_to_ended_s", "p50"), "(b) median")]

    cc = (co.get("steps") or {}).get("cpu_ms_per_step") or {}
    sc = (sl.get("steps") or {}).get("cpu_ms_per_step") or {}
    if cc or sc:
        lines += ["", "(c) CPU per step during (a)'s timed loop (ms of CPU per `srun -N4 -n4 "
                  "true`; `true` itself included on every node):", "",
                  "| what | Corral | Slurm 22.05 |", "|---|---|---|"]
        order = [f"node {n}" + (" (incl. batch script + srun client)" if n == "n1" else "")
                 for n in NODES]
        order += ["srun client (bash times, in n1)", "n1 without the srun client",
                  "four nodes without the srun client", "four nodes, total"]
        for k in order:
            lines.append(f"| {k} | {_f(cc.get(k))} | {_f(sc.get(k))} |")
        lines.append(f"| controller (Corral) / slurmctld | {_f(cc.get('controller'))} | "
                     f"{_f(sc.get('slurmctld'))} |")
        lines.append(f"| munged | — | {_f(sc.get('munged'))} |")
        for n in NODES:
            lines.append(f"| daemon process alone on {n} (agent / slurmd) | "
                         f"{_f(cc.get(f'agent {n} (process alone)'))} | "
                         f"{_f(sc.get(f'slurmd {n} (process alone)'))} |")
        lines.append(f"| whole machine busy (all processes, others' too) | "
                     f"{_f(cc.get('whole machine (busy, all processes)'))} | "
                     f"{_f(sc.get('whole machine (busy, all processes)'))} |")
    rounds = res.get("rounds") or []
    if len(rounds) > 1:
        lines += ["", f"Medians over {len(rounds)} rounds (fresh clusters each round, the order "
                  "alternating). Each round:", "",
                  "| round (order) | (a) Corral / Slurm median ms | ratio | (b) Corral / Slurm "
                  "median ms | ratio | load at the round's start |", "|---|---|---|---|---|---|"]
        for i, one in enumerate(rounds):
            rc, rs = one.get("corral") or {}, one.get("slurm") or {}
            a = (get(rc, "steps", "srun_call_s", "p50"), get(rs, "steps", "srun_call_s", "p50"))
            b = (get(rc, "mpi", "submit_to_ended_s", "p50"),
                 get(rs, "mpi", "submit_to_ended_s", "p50"))
            ra = f"{a[0] / a[1]:.2f}" if a[0] and a[1] else "—"
            rb = f"{b[0] / b[1]:.2f}" if b[0] and b[1] else "—"
            lines.append(f"| {i + 1} ({' then '.join(one.get('order', []))}) | "
                         f"{_f(a[0] * 1000 if a[0] else None)} / "
                         f"{_f(a[1] * 1000 if a[1] else None)} | {ra} | "
                         f"{_f(b[0] * 1000 if b[0] else None)} / "
                         f"{_f(b[1] * 1000 if b[1] else None)} | {rb} | "
                         f"{one.get('loadavg_start', '?')} |")
    lines += ["", "Section details" + (" (figures: medians over the rounds; load averages: "
                                       "round 1's)" if len(rounds) > 1 else "") + ":", ""]
    for side, d in (("Corral", co), ("Slurm", sl)):
        s = d.get("steps")
        if s:
            lines.append(f"- {side} (a): job {s['job_id']} ({s['final_state']}), {s['steps']} "
                         f"timed steps after {s['warmup']} warm-up, loop {s['loop_s']:.2f} s, "
                         f"load {s['loadavg']}; step daemons gone {s['settle_s'] * 1000:.0f} ms "
                         f"after the loop{'' if s['settled'] else ' (NOT settled in 20 s)'}"
                         + (f"; failures: {s['failures'].strip()}" if s.get("failures") else
                            "") + ".")
        m = d.get("mpi")
        if m:
            lines.append(f"- {side} (b): {m['ok']}/{m['reps']} jobs with 4 ranks on n1..n4, "
                         f"load at the first/last submit {m['loadavg_per_rep'][0]} / "
                         f"{m['loadavg_per_rep'][-1]}"
                         + (f"; failures: {len(m['failures'])} shown in the JSON"
                            if m.get("failures") else "") + ".")
        if d.get("error"):
            lines.append(f"- {side}: ERROR {d['error'][:600]}")
    lines += ["", "How it was measured: see the docstring of `bench/multinode_bench.py`. (b)'s "
              "end is polled (every 2 ms for the script's last line in its output file, "
              "then every 20 ms for the job's state: Corral's client over its socket, "
              "Slurm's `squeue` process); "
              "`sbatch --wait` would measure the tools' poll intervals (0.5 s and 2 s)."]
    if res.get("notes"):
        lines += ["", str(res["notes"]).strip()]
    return "\n".join(lines) + "\n"


def median_of(per: list[Any]) -> Any:
    """The median over rounds of every number (same structure; the rest from round 1)."""
    first = per[0]
    if isinstance(first, dict):
        out: dict[str, Any] = {}
        for k, v in first.items():
            vals: list[Any] = [p[k] for p in per if isinstance(p, dict) and k in p]
            nums = [x for x in vals if isinstance(x, (int, float)) and not isinstance(x, bool)]
            if isinstance(v, dict):
                out[k] = median_of(vals)
            elif len(nums) == len(vals) and nums:
                out[k] = statistics.median(nums)
            else:
                out[k] = v
        return out
    return first


def _f(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def run_side(side: Side, work: Path, exe: Path, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"loadavg_start": loadavg()}
    try:
        print(f"{side.name}: starting the cluster ...", flush=True)
        side.up()  # type: ignore[attr-defined]
        out["version"] = side.version()  # type: ignore[attr-defined]
        print(f"{side.name}: (a) {args.steps} steps ...", flush=True)
        out["steps"] = steps_section(side, work, args.steps, args.warmup)
        s = out["steps"]["srun_call_s"]
        print(f"  srun p50 {s['p50'] * 1000:.1f} ms, p99 {s['p99'] * 1000:.1f} ms; CPU/step "
              f"{out['steps']['cpu_ms_per_step']['four nodes, total']:.1f} ms", flush=True)
        print(f"{side.name}: (b) {args.reps} MPI jobs ...", flush=True)
        out["mpi"] = mpi_section(side, work, exe, args.reps)
        m = out["mpi"]["submit_to_ended_s"]
        print(f"  {out['mpi']['ok']}/{args.reps} ok, submit->ended p50 {m['p50'] * 1000:.0f} ms",
              flush=True)
        if out["mpi"]["failures"]:
            print("  first failure:\n" + out["mpi"]["failures"][0], flush=True)
    except Exception as exc:  # noqa: BLE001
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["logs"] = side.logs()[-6000:]
        print(f"{side.name}: ERROR {out['error']}\n{out['logs']}", flush=True)
    finally:
        side.down()  # type: ignore[attr-defined]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=100, help="timed srun calls in (a)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed srun calls before (a)")
    ap.add_argument("--reps", type=int, default=20, help="MPI jobs in (b)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run both sides this many times, alternating the order")
    ap.add_argument("--skip-slurm", action="store_true", help="Corral only")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--render-only", action="store_true",
                    help="only write the Markdown again from OUT/multinode_bench.json")
    ap.add_argument("--notes", type=Path, default=None,
                    help="a Markdown file whose text ends the results")
    args = ap.parse_args()
    jpath, mpath = args.out / "multinode_bench.json", args.out / "multinode_bench.md"
    if args.render_only:
        res0 = json.loads(jpath.read_text())
        if args.notes is not None:
            res0["notes"] = args.notes.read_text()
            jpath.write_text(json.dumps(res0, indent=2) + "\n")
        mpath.write_text(render_md(res0))
        print(render_md(res0))
        return
    work = Path(tempfile.mkdtemp(prefix="multinode-bench-"))
    os.chmod(work, 0o755)
    res: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": platform.node(),
        "cpus": os.cpu_count(), "python": platform.python_version(),
        "kernel": platform.release(), "loadavg_start": loadavg(),
        "command": " ".join(["python bench/multinode_bench.py", *sys.argv[1:]]),
        "steps": args.steps, "warmup": args.warmup, "reps": args.reps,
        "rounds_run": args.rounds,
    }
    rounds: list[dict[str, Any]] = []
    try:
        exe = build_mpi(work)
        for r in range(args.rounds):
            rw = work / f"round{r}"
            rw.mkdir()
            one: dict[str, Any] = {"loadavg_start": loadavg()}
            order = ["slurm", "corral"] if r % 2 == 0 else ["corral", "slurm"]
            for name in order:
                if name == "slurm" and args.skip_slurm:
                    continue
                print(f"--- round {r + 1}/{args.rounds}: {name}", flush=True)
                if name == "slurm":
                    one["slurm"] = run_side(SlurmSide(), rw, exe, args)
                else:
                    (rw / "corral").mkdir()
                    one["corral"] = run_side(CorralSide(rw / "corral"), rw, exe, args)
            one["order"] = [n for n in order if n in one]
            rounds.append(one)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res["rounds"] = rounds
    for name in ("slurm", "corral"):
        per = [one[name] for one in rounds if name in one]
        if per:
            res[name] = median_of(per)
            res[f"{name}_version"] = per[0].get("version")
    res["loadavg_end"] = loadavg()
    if args.notes is not None:
        res["notes"] = args.notes.read_text()
    args.out.mkdir(parents=True, exist_ok=True)
    jpath.write_text(json.dumps(res, indent=2) + "\n")
    md = render_md(res)
    mpath.write_text(md)
    print(md)


if __name__ == "__main__":
    main()
