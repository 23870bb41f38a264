"""Steps across hosts: srun tasks, cancel, MPI ranks and an interactive shell on network-
namespace hosts, each with its own host name and address, the controller on a head host
reached over TCP (``hosts.py``). What a task prints with ``hostname`` is the host it ran on.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.multinode.hosts import NetnsCluster, wait_for
from tests.steps_support import PtyReader, build_mpi

pytestmark = [pytest.mark.multinode, pytest.mark.root]


def _lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []


def test_srun_places_tasks_on_their_hosts(mn_cluster: NetnsCluster) -> None:
    c = mn_cluster
    out = c.shared / "steps-hosts.out"
    jid = c.sbatch(1, "-N3", "-o", str(out), "--wrap",
                   "srun -N3 -l hostname; "
                   "srun -N3 -n3 -l bash -c 'echo $SLURMD_NODENAME $SLURM_NODEID'; "
                   "srun -n3 -N3 -m cyclic -l bash -c 'grep -c ^processor /proc/cpuinfo "
                   ">/dev/null; echo $(hostname)-$SLURM_PROCID'")
    job = c.wait_done(jid, 90)
    assert job["state"] == "COMPLETED", (job, _lines(out), c.logs())
    nodes = job["nodes"]
    lines = _lines(out)
    assert sorted(ln for ln in lines if ln.count(" ") == 1 and ":" in ln
                  and ln.split(": ")[1] in nodes) == [f"{i}: {n}" for i, n in enumerate(nodes)]
    for i, n in enumerate(nodes):
        assert f"{i}: {n} {i}" in lines, lines  # SLURMD_NODENAME/NODEID = the real host
        assert f"{i}: {n}-{i}" in lines, lines


def test_srun_from_a_login_host_and_cancel_reaching_every_host(mn_cluster: NetnsCluster) -> None:
    c = mn_cluster
    # the head runs the controller and no agent: a login host sharing only the network
    r = c.run_on(c.head, ["srun", "-N2", "-l", "hostname"], timeout=90)
    assert r.returncode == 0, (r.stderr, c.logs())
    got = sorted(ln.split(": ")[1] for ln in r.stdout.splitlines())
    assert len(got) == 2 and set(got) <= set(c.names), r.stdout
    marker = f"corral-mnc-{os.getpid()}"
    jid = c.sbatch(1, "-N3", "-o", "/dev/null", "--wrap",
                   f"srun -N3 bash -c 'exec -a {marker} sleep 300'")

    def running_on() -> set[str]:
        hosts = set()
        for h in c.hosts:
            r = subprocess.run(["ip", "netns", "pids", h.name], capture_output=True,
                               text=True)
            for pid in r.stdout.split():
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if cmd.startswith(marker.encode()):
                    hosts.add(h.name)
        return hosts

    wait_for(lambda: running_on() == set(c.names), 60, what="a task on every host")
    assert c.run_on(2, ["scancel", str(jid)]).returncode == 0
    wait_for(lambda: not running_on(), 30, what="the tasks on every host to be killed")
    assert c.wait_done(jid)["state"] == "CANCELLED"


def test_open_mpi_ranks_run_on_the_hosts_of_the_allocation(mn_cluster: NetnsCluster) -> None:
    c = mn_cluster
    exe = build_mpi("openmpi", c.shared)
    out = c.shared / "ompi-hosts.out"
    jid = c.sbatch(1, "-N2", "--ntasks-per-node=1", "-o", str(out), "--wrap",
                   "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; "
                   f"mpirun.openmpi --mca btl tcp,self --mca oob_tcp_if_include eth0 "
                   f"--mca btl_tcp_if_include eth0 {exe}; echo rc=$?")
    job = c.wait_done(jid, 120)
    lines = _lines(out)
    assert job["state"] == "COMPLETED" and "rc=0" in lines, (lines, c.logs())
    nodes = job["nodes"]
    ranks = sorted(ln for ln in lines if ln.startswith("rank"))
    assert ranks == [f"rank 0 of 2 on {nodes[0]} sum 3", f"rank 1 of 2 on {nodes[1]} sum 3"]
    assert "pingpong 42" in lines  # a message between ranks on different hosts


def test_mpich_pmi2_direct_launch_across_hosts(mn_cluster: NetnsCluster) -> None:
    c = mn_cluster
    exe = build_mpi("mpich", c.shared)
    out = c.shared / "mpich-hosts.out"
    jid = c.sbatch(1, "-N2", "-n2", "-o", str(out), "--wrap",
                   f"srun --mpi=pmi2 {exe}; echo rc=$?")
    job = c.wait_done(jid, 120)
    lines = _lines(out)
    assert job["state"] == "COMPLETED" and "rc=0" in lines, (lines, c.logs())
    nodes = job["nodes"]
    ranks = sorted(ln for ln in lines if ln.startswith("rank"))
    assert ranks == [f"rank 0 of 2 on {nodes[0]} sum 3", f"rank 1 of 2 on {nodes[1]} sum 3"]
    assert "pingpong 42" in lines


def test_srun_pty_from_the_submit_host(mn_cluster: NetnsCluster) -> None:
    import pty

    c = mn_cluster
    target = c.host(2).name
    argv = c.wrap(c.head, ["srun", "-w", target, "--pty", "bash", "--norc", "-i"])
    env = c.host_env(env={"PS1": "mn-prompt$ "})
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(c.shared)
        os.execvpe(argv[0], argv, env)
    term = PtyReader(fd)
    try:
        assert term.until(b"mn-prompt$ ", 60), term.seen
        os.write(fd, b"echo on-$(hostname)-end; exit 4\n")
        assert term.until(f"on-{target}-end".encode(), 60), term.seen
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 4, term.seen
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(fd)


def test_a_lost_host_ends_a_multi_node_job_on_every_host(
        mn_cluster_factory: Callable[..., NetnsCluster]) -> None:
    c = mn_cluster_factory(2, settings={"controller": {"node_fail_grace_s": 1}})
    first, second = c.host(1), c.host(2)
    marker = f"corral-lost-{os.getpid()}"
    jid = c.sbatch(first, "-N2", "-w", f"{first.name},{second.name}", "--no-requeue",
                   "-o", "/dev/null", "--wrap",
                   f"srun -N2 bash -c 'exec -a {marker} sleep 300'")

    def tasks_on(h: object) -> int:
        r = subprocess.run(["ip", "netns", "pids", c.host(h).name],  # type: ignore[arg-type]
                           capture_output=True, text=True)
        n = 0
        for pid in r.stdout.split():
            try:
                n += Path(f"/proc/{pid}/cmdline").read_bytes().startswith(marker.encode())
            except OSError:
                continue
        return n

    wait_for(lambda: tasks_on(first) == 1 and tasks_on(second) == 1, 60, what="both tasks")
    with c.link_cut(second):
        job = c.wait_done(jid, 30)
        assert job["state"] == "NODE_FAIL", (job, c.logs())
        # the first host's batch script and its task were killed too
        wait_for(lambda: tasks_on(first) == 0, 20, what="the first host's task to die")
    c.wait_all_up()
