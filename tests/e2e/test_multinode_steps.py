"""Steps across nodes: a controller and two agents (nodes ``ma`` and ``mb``) on this machine.

Everything is real: controller and agent processes, the agents' supervisors and step
processes, srun's I/O connections, Open MPI and MPICH programs. The two agents share
this kernel (so tasks are told apart by ``SLURMD_NODENAME``/``SLURM_NODEID`` and by the
node their step process ran on); ``tests/multinode`` runs the same across network
namespaces with their own host names.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.client import Client
from tests.e2e.cluster import ENTRY, wait_for
from tests.steps_support import PtyReader, build_mpi

CONFIG = """
[controller]
schedule_delay_ms = 2
tick_s = 1
node_down_after_s = 3
node_fail_grace_s = 2
kill_grace_s = 1

[agent]
heartbeat_s = 0.5
reconnect_max_s = 0.3

[[nodes]]
name = "ma"
cpus = 2
mem_mb = 2000

[[nodes]]
name = "mb"
cpus = 2
mem_mb = 2000

[[partitions]]
name = "main"
nodes = "ma,mb"
default = true

[scheduler]
default_mem_per_cpu_mb = 100
"""


class TwoNodes:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.state = root / "state"
        self.state.mkdir(parents=True)
        (root / "corral.toml").write_text(CONFIG)
        self.bin = root / "bin"
        self.work = root / "work"
        self.work.mkdir()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.env = dict(os.environ, CORRAL_STATE_DIR=str(self.state),
                        PATH=f"{self.bin}:{os.environ['PATH']}")
        self.env.pop("SLURM_JOB_ID", None)

    def _start(self, name: str, *args: str) -> None:
        log = open(self.root / f"{name}.log", "ab")
        self.procs[name] = subprocess.Popen([sys.executable, "-c", ENTRY, *args], stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def up(self) -> None:
        self._start("controller", "controller", "--state-dir", str(self.state), "--config",
                    str(self.root / "corral.toml"))
        wait_for(lambda: (self.state / "cluster.key").exists()
                 and (self.state / "corral.sock").exists(), 30, what="the controller")
        for node in ("ma", "mb"):
            self._start(node, "agent", "--controller", f"unix:{self.state}/corral.sock",
                        "--key-file", str(self.state / "cluster.key"), "--state-dir",
                        str(self.root / f"agent-{node}"), "--name", node, "--config",
                        str(self.root / "corral.toml"))
        r = subprocess.run([sys.executable, "-c", ENTRY, "shims", "install", "--force",
                            str(self.bin)],
                           capture_output=True, text=True, env=self.env)
        assert r.returncode == 0, r.stderr
        with self.client() as c:
            try:
                wait_for(lambda: sorted(n["name"] for n in c.nodes()
                                        if n["state"] in ("IDLE", "MIXED", "ALLOCATED"))
                         == ["ma", "mb"], 30, what="both agents")
            except AssertionError as exc:  # say which agent, and why (its log)
                states = [(n["name"], n["state"], n.get("reason")) for n in c.nodes()]
                raise AssertionError(f"{exc}; nodes: {states}\n{self.logs()}") from None

    def client(self) -> Client:
        return Client(socket_path=str(self.state / "corral.sock"))

    def down(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        # jobs' supervisors live in sessions of their own: kill what a failed test left
        for sup in self.root.glob("agent-*/jobs/*/status.json"):
            try:
                os.kill(int(json.loads(sup.read_text())["supervisor_pid"]), signal.SIGKILL)
            except (OSError, ValueError, KeyError):
                pass

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}"
                         for p in sorted(self.root.glob("*.log")))

    def sbatch(self, script: str, *args: str) -> int:
        path = self.work / f"job{time.monotonic_ns()}.sh"
        path.write_text(script)
        r = subprocess.run(["sbatch", "--parsable", *args, str(path)], capture_output=True,
                           text=True, env=self.env, cwd=self.work, timeout=60)
        assert r.returncode == 0, r.stderr
        return int(r.stdout.strip().split(";")[0])

    def wait_done(self, job_id: int, timeout: float = 60) -> dict[str, object]:
        with self.client() as c:
            def done() -> dict[str, object] | None:
                j = c.job(job_id)
                return j if j["state"] not in ("PENDING", "RUNNING", "COMPLETING",
                                               "SUSPENDED") else None
            try:
                return wait_for(done, timeout, interval=0.05, what=f"job {job_id} to end")
            except AssertionError:
                raise AssertionError(f"job {job_id} did not end\n{self.logs()}") from None

    def run(self, *cmd: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(list(cmd), capture_output=True, text=True, env=self.env,
                              cwd=self.work, timeout=timeout)


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoNodes]:
    root = tmp_path_factory.mktemp("twonodes")
    os.chmod(root, 0o755)
    cl = TwoNodes(root)
    try:
        cl.up()
        yield cl
    finally:
        cl.down()


def _count(marker: str) -> int:
    """Processes whose argv[0] is ``marker`` (tasks started with ``exec -a marker``;
    srun's own command line only contains it)."""
    r = subprocess.run(["pgrep", "-f", f"^{marker} "], capture_output=True, text=True)
    return len(r.stdout.split())


def _lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.strip()]


def test_srun_runs_each_task_on_its_node(two: TwoNodes) -> None:
    out = two.work / "place.out"
    jid = two.sbatch(
        "#!/bin/bash\n"
        "srun -N2 -n2 -l bash -c 'echo $SLURMD_NODENAME $SLURM_NODEID $SLURM_LOCALID "
        "$SLURM_STEP_NODELIST $SLURM_STEP_TASKS_PER_NODE'\n"
        "echo rc=$?\n"
        "srun -n4 bash -c 'echo block $SLURM_PROCID $SLURMD_NODENAME'\n"
        "srun -n3 -m cyclic bash -c 'echo cyclic $SLURM_PROCID $SLURMD_NODENAME'\n"
        "srun -N1 -r1 bash -c 'echo relative $SLURMD_NODENAME'\n"
        "srun -w mb bash -c 'echo nodelist $SLURMD_NODENAME'\n"
        "srun -x ma bash -c 'echo exclude $SLURMD_NODENAME'\n",
        "-N2", "-n4", "-o", str(out))
    assert two.wait_done(jid)["state"] == "COMPLETED", out.read_text()
    lines = _lines(out)
    assert "0: ma 0 0 ma,mb 1(x2)" in lines and "1: mb 1 0 ma,mb 1(x2)" in lines, lines
    assert "rc=0" in lines
    block = sorted(ln for ln in lines if ln.startswith("block"))
    assert block == ["block 0 ma", "block 1 ma", "block 2 mb", "block 3 mb"], lines
    cyclic = sorted(ln for ln in lines if ln.startswith("cyclic"))
    assert cyclic == ["cyclic 0 ma", "cyclic 1 mb", "cyclic 2 ma"], lines
    assert "relative mb" in lines and "nodelist mb" in lines and "exclude mb" in lines


def test_exit_status_is_the_worst_task_and_names_the_node(two: TwoNodes) -> None:
    out = two.work / "rc.out"
    jid = two.sbatch("#!/bin/bash\nsrun -N2 -n2 bash -c 'exit $((SLURM_PROCID * 3))'\n"
                     "echo rc=$?\n"
                     "srun -N2 -n2 bash -c '[ $SLURM_PROCID = 1 ] && kill -KILL $$; true'\n"
                     "echo rc=$?\n"
                     "start=$SECONDS\n"
                     "srun -w ma,mb -K bash -c '[ $SLURM_NODEID = 0 ] && exit 4; sleep 30'\n"
                     "echo rc=$? took=$((SECONDS - start))\n",
                     "-N2", "-o", str(out))
    two.wait_done(jid)
    text = out.read_text()
    assert "srun: error: mb: task 1: Exited with exit code 3" in text, text
    assert "rc=3" in text
    assert "srun: error: mb: task 1: Killed" in text and "rc=137" in text, text
    # --kill-on-bad-exit: the sleeping task on mb is killed at once
    assert "--kill-on-bad-exit" in text and "srun: error: ma: task 0: Exited with exit code 4" \
        in text, text
    took = [ln for ln in text.splitlines() if ln.startswith("rc=137 took=")]
    assert took and int(took[0].split("=")[-1]) < 20, text


def test_cancel_and_batch_end_reach_every_node(two: TwoNodes) -> None:
    marker = f"corral-mn-{os.getpid()}"
    jid = two.sbatch(f"#!/bin/bash\nsrun -N2 -n2 bash -c 'exec -a {marker}-a sleep 300'\n",
                     "-N2", "-o", "/dev/null")

    def pids(tag: str) -> list[int]:
        # the task's argv[0] is the tag (exec -a); srun's own command line only contains it
        r = subprocess.run(["pgrep", "-f", f"^{tag} "], capture_output=True, text=True)
        return [int(p) for p in r.stdout.split()]

    wait_for(lambda: len(pids(f"{marker}-a")) == 2, 30, what="both tasks")
    assert two.run("scancel", str(jid)).returncode == 0
    wait_for(lambda: not pids(f"{marker}-a"), 15, what="tasks on both nodes to be killed")
    assert two.wait_done(jid)["state"] == "CANCELLED"
    # the batch script ends while a step still runs on the other node: it is killed
    jid = two.sbatch(f"#!/bin/bash\nsrun -w mb bash -c 'exec -a {marker}-b sleep 300' &\n"
                     f"until pgrep -f {marker}-b >/dev/null; do sleep 0.05; done\n",
                     "-N2", "-o", "/dev/null")
    assert two.wait_done(jid)["state"] == "COMPLETED"
    wait_for(lambda: not pids(f"{marker}-b"), 15, what="the left-over step on mb to die")


_POLICY = "grep -m1 -oE '(bind|prefer):[0-9,-]+' /proc/self/numa_maps || echo unbound"


def test_mem_bind_sets_each_tasks_memory_policy(two: TwoNodes) -> None:
    """srun --mem-bind through the compiled step process, the Python one (verbose) and
    srun's own tasks (CORRAL_SRUN_LAUNCH=local): the kernel's policy of each task,
    read back from /proc/self/numa_maps; node 0 is this host's only NUMA node."""
    out = two.work / "membind.out"
    jid = two.sbatch(
        "#!/bin/bash\n"
        f"srun -w ma -n2 --mem-bind=local -l bash -c "
        f"\"{_POLICY}; echo type=\\$SLURM_MEM_BIND_TYPE\"\n"
        f"srun -N2 -n2 --mem-bind=map_mem:0 -l bash -c \"echo \\$SLURMD_NODENAME; {_POLICY}\"\n"
        f"srun -N2 -n2 --mem-bind=v,prefer,mask_mem:0x1 -l bash -c \"{_POLICY}\"\n"
        f"srun -N2 -n2 --mem-bind=map_mem:7 -l bash -c \"{_POLICY}\"\n"
        f"srun -N2 -n2 -l bash -c \"{_POLICY}\"\n"
        f"CORRAL_SRUN_LAUNCH=local srun -w ma -n1 --mem-bind=v,local bash -c \"{_POLICY}\"\n"
        "srun -N2 -n2 --mem-bind=bogus true; echo rc=$?\n"
        "srun -N2 -n2 --mem-bind=map_mem:x true; echo rc=$?\n",
        "-N2", "-n2", "-o", str(out))
    assert two.wait_done(jid)["state"] == "COMPLETED"
    lines = _lines(out)
    text = "\n".join(lines)
    assert lines[:4] == ["0: bind:0", "0: type=local", "1: bind:0", "1: type=local"] or \
        sorted(lines[:4]) == ["0: bind:0", "0: type=local", "1: bind:0", "1: type=local"], text
    assert sorted(lines[4:8]) == ["0: bind:0", "0: ma", "1: bind:0", "1: mb"], text
    assert "0: prefer:0" in lines[8:12] and "1: prefer:0" in lines[8:12], text
    assert any(ln.startswith("0: mem-bind=MASK_MEM - ma, task  0  0 [") and
               ln.endswith("]: mask 0x1 set") for ln in lines[8:12]), text
    assert any("mem-bind=MASK_MEM - mb, task  1  0 [" in ln for ln in lines[8:12]), text
    assert lines[12:14] == ["0: unbound", "1: unbound"] or \
        sorted(lines[12:14]) == ["0: unbound", "1: unbound"], text  # no node 7 here
    assert sorted(lines[14:16]) == ["0: unbound", "1: unbound"], text  # the default: none
    assert lines[16].startswith("mem-bind=LOCAL - ma, task  0  0 [") and \
        lines[16].endswith("]: mask 0x1 set") and lines[17] == "bind:0", text  # srun's own
    assert "srun: error: invalid --mem-bind argument 'bogus'" in text and \
        "srun: error: bad NUMA node 'x' in --mem-bind list" in text, text
    assert lines[-1] == "rc=1" and lines.count("rc=1") == 2, text


def test_sacct_shows_the_step_nodes(two: TwoNodes) -> None:
    jid = two.sbatch("#!/bin/bash\nsrun -N2 -J both true\nsrun -w mb -J onlyb true\n",
                     "-N2", "-o", "/dev/null")
    two.wait_done(jid)
    r = two.run("sacct", "-j", str(jid), "-n", "-P", "-o", "JobID,JobName,NodeList,State")
    rows = [ln.split("|") for ln in r.stdout.splitlines()]
    assert [f"{jid}.0", "both", "ma,mb", "COMPLETED"] in rows or \
        [f"{jid}.0", "both", "m[a-b]", "COMPLETED"] in rows, rows
    assert [f"{jid}.1", "onlyb", "mb", "COMPLETED"] in rows, rows


def test_cpu_bind_is_applied_per_task(two: TwoNodes) -> None:
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    out = two.work / "bind.out"
    jid = two.sbatch(
        "#!/bin/bash\n"
        "srun -N1 -n2 -c1 --cpu-bind=threads -l bash -c "
        "'grep Cpus_allowed_list /proc/self/status; echo $SLURM_CPU_BIND_TYPE'\n"
        "srun -N2 -n2 --cpu-bind=map_cpu:1 -l grep Cpus_allowed_list /proc/self/status\n"
        "srun -N2 -n2 --cpu-bind=bogus true; echo rc=$?\n",
        "-N2", "-n2", "--exclusive", "-o", str(out))
    two.wait_done(jid)
    lines = _lines(out)
    local = sorted(ln.split("\t")[-1] for ln in lines if ln.startswith(("0: Cpus", "1: Cpus"))
                   and "\t" in ln)
    assert "0" in local and "1" in local, lines
    assert "0: threads," in lines, lines
    assert lines.count("0: Cpus_allowed_list:\t1") == 2 or (
        "0: Cpus_allowed_list:\t1" in lines and "1: Cpus_allowed_list:\t1" in lines), lines
    assert any("invalid --cpu-bind type" in ln for ln in lines) and "rc=1" in lines, lines


def test_open_mpi_mpirun_starts_ranks_on_both_nodes(two: TwoNodes) -> None:
    exe = build_mpi("openmpi", two.work)
    if shutil.which("mpirun.openmpi") is None:
        pytest.skip("mpirun.openmpi is not installed")
    out = two.work / "ompi.out"
    jid = two.sbatch("#!/bin/bash\nexport OMPI_ALLOW_RUN_AS_ROOT=1 "
                     "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1\n"
                     "export MPI_WHERE=SLURMD_NODENAME\n"
                     f"mpirun.openmpi --mca btl tcp,self {exe}\necho rc=$?\n",
                     "-N2", "--ntasks-per-node=1", "-o", str(out))
    two.wait_done(jid, 90)
    lines = _lines(out)
    assert sorted(ln for ln in lines if ln.startswith("rank")) == [
        "rank 0 of 2 on ma sum 3", "rank 1 of 2 on mb sum 3"], lines
    assert "pingpong 42" in lines and "rc=0" in lines, lines


def test_mpich_direct_launch_with_pmi2(two: TwoNodes) -> None:
    exe = build_mpi("mpich", two.work)
    out = two.work / "mpich.out"
    jid = two.sbatch("#!/bin/bash\nexport MPI_WHERE=SLURMD_NODENAME\n"
                     f"srun --mpi=pmi2 -n4 {exe}\necho rc=$?\n"
                     "srun --mpi=bogus true\necho rc=$?\n",
                     "-N2", "-n4", "-o", str(out))
    two.wait_done(jid, 90)
    lines = _lines(out)
    ranks = sorted(ln for ln in lines if ln.startswith("rank"))
    assert ranks == ["rank 0 of 4 on ma sum 10", "rank 1 of 4 on ma sum 10",
                     "rank 2 of 4 on mb sum 10", "rank 3 of 4 on mb sum 10"], lines
    assert "pingpong 42" in lines and lines.count("rc=0") == 1, lines
    assert "srun: error: invalid MPI type 'bogus', --mpi=list for acceptable types" in lines
    assert "rc=1" in lines


def _share_supervisor(two: TwoNodes, jid: int, restarts: int) -> int | None:
    for path in two.root.glob(f"agent-mb/jobs/{jid}/status.json"):
        data = json.loads(path.read_text())
        if data.get("state") == "RUNNING" and data.get("restarts") == restarts:
            return int(data["supervisor_pid"])
    return None


def test_a_node_losing_its_share_fails_or_requeues_the_job(two: TwoNodes) -> None:
    jid = two.sbatch("#!/bin/bash\nsleep 300\n", "-N2", "--no-requeue", "-o", "/dev/null")
    os.kill(wait_for(lambda: _share_supervisor(two, jid, 0), 30, what="the share on mb"),
            signal.SIGKILL)
    job = two.wait_done(jid, 30)
    assert job["state"] == "NODE_FAIL", job
    # a requeueable job starts again (a new run on both nodes)
    jid = two.sbatch("#!/bin/bash\nsleep 300\n", "-N2", "--requeue", "-o", "/dev/null")
    os.kill(wait_for(lambda: _share_supervisor(two, jid, 0), 30, what="the share on mb"),
            signal.SIGKILL)
    wait_for(lambda: _share_supervisor(two, jid, 1), 30, what="the requeued run's share")
    assert two.run("scancel", str(jid)).returncode == 0
    assert two.wait_done(jid)["state"] == "CANCELLED"


def test_srun_and_salloc_from_outside_the_job(two: TwoNodes) -> None:
    # srun outside a job: allocates, runs the tasks on the nodes, releases with the rc
    r = two.run("srun", "-N2", "-l", "bash", "-c", "echo $SLURMD_NODENAME; exit $SLURM_NODEID")
    assert sorted(r.stdout.splitlines()) == ["0: ma", "1: mb"], r.stderr
    assert r.returncode == 1 and "srun: error: mb: task 1: Exited with exit code 1" in r.stderr
    r = two.run("salloc", "-N2", "bash", "-c",
                "srun -l bash -c 'echo $SLURMD_NODENAME $SLURM_JOB_ID'; exit 3")
    assert r.returncode == 3, r.stderr
    jid = r.stderr.split("Granted job allocation ")[1].split()[0]
    assert sorted(r.stdout.split("\n")[:2]) == [f"0: ma {jid}", f"1: mb {jid}"], r.stdout
    with two.client() as c:
        job = c.job(jid)
    assert job["state"] == "FAILED" and job["exit_code"] == 3, job
    r = subprocess.run(["srun", "-w", "mb", "cat"], input="to task 0\n", capture_output=True,
                       text=True, env=two.env, cwd=two.work, timeout=60)
    assert r.stdout == "to task 0\n" and r.returncode == 0, r.stderr


def test_srun_pty_gives_a_terminal_on_the_first_node(two: TwoNodes) -> None:
    import pty
    env = dict(two.env, PS1="pty-prompt$ ")
    srun = shutil.which("srun", path=env["PATH"])
    assert srun is not None
    pid, fd = pty.fork()
    if pid == 0:  # the child: srun on a terminal of its own (nothing but system calls)
        os.chdir(two.work)
        os.execve(srun, [srun, "-w", "mb", "--pty", "bash", "--norc", "-i"], env)
    term = PtyReader(fd)
    try:
        if not term.until(b"pty-prompt$ "):  # bash reads input now
            raise AssertionError(f"no prompt: {term.seen!r}\n" + two.logs())
        os.write(fd, b"tty; echo node-$SLURMD_NODENAME-end\n")
        assert term.until(b"node-mb-end"), term.seen
        assert b"/dev/pts/" in term.seen, term.seen
        # the prompt after the command's output (it may have come in the same read)
        assert term.until(b"pty-prompt$ ", start=term.seen.index(b"node-mb-end")), term.seen
        os.write(fd, b"sleep 100\n")
        time.sleep(0.5)  # let bash start the sleep (a race would only weaken the check)
        os.write(fd, b"\x03")  # Ctrl-C reaches the remote foreground job through the pty
        os.write(fd, b"echo after-$?\nexit 6\n")
        assert term.until(b"after-130"), term.seen
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 6, term.seen
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(fd)


def test_sigterm_to_srun_ends_the_step_on_every_node(two: TwoNodes) -> None:
    marker = f"corral-term-{os.getpid()}"
    p = subprocess.Popen(["srun", "-N2", "bash", "-c", f"exec -a {marker} sleep 300"],
                         env=two.env, cwd=two.work, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)

    def tasks() -> int:
        return _count(marker)

    try:
        wait_for(lambda: tasks() == 2, 30, what="both tasks")
        p.send_signal(signal.SIGTERM)
        _out, err = p.communicate(timeout=30)
        assert p.returncode == 128 + signal.SIGTERM, err
        wait_for(lambda: tasks() == 0, 15, what="the tasks to end")
    finally:
        if p.poll() is None:
            p.kill()


def test_time_limit_ends_the_steps_on_every_node(two: TwoNodes) -> None:
    from corral.core.model.job import JobSpec
    from corral.submission import JobSubmission

    marker = f"corral-tl-{os.getpid()}"
    out = two.work / "timelimit.out"
    # a 3-second limit (sbatch's -t counts whole minutes): through the API
    sub = JobSubmission(
        spec=JobSpec(name="tl", user="root", uid=os.getuid(), gid=os.getgid(), nodes_min=2,
                     nodes_max=2, time_limit_s=3),
        script=f"#!/bin/bash\nsrun -N2 bash -c 'exec -a {marker} sleep 300'\n",
        workdir=str(two.work), stdout=str(out), env={"PATH": two.env["PATH"]})
    with two.client() as c:
        jid = c.submit(sub)[0]

    def tasks() -> int:
        return _count(marker)

    try:
        wait_for(lambda: tasks() == 2, 30, what="both tasks")
    except AssertionError:
        with two.client() as c:
            job = c.job(jid)
        raise AssertionError(f"{job['state']} {out.read_text() if out.exists() else ''}") \
            from None
    job = two.wait_done(jid, 60)
    assert job["state"] == "TIMEOUT", job
    wait_for(lambda: tasks() == 0, 15, what="the tasks on both nodes to end")
    assert "DUE TO TIME LIMIT" in out.read_text()


def test_step_usage_is_recorded_on_both_launch_paths(two: TwoNodes) -> None:
    hog = two.work / "hog.py"
    hog.write_text("import time\nb = bytearray(60 << 20)\nt = time.process_time()\n"
                   "while time.process_time() - t < 0.3:\n    pass\n")
    py = sys.executable
    jid = two.sbatch("#!/bin/bash\n"
                     f"srun -w ma {py} {hog}\n"  # on srun's own node: local tasks
                     f"srun -w mb {py} {hog}\n",  # through mb's agent
                     "-N2", "-w", "ma,mb", "-o", "/dev/null")
    assert two.wait_done(jid)["state"] == "COMPLETED"
    r = two.run("sacct", "-j", f"{jid}.0,{jid}.1", "-n", "-P", "--noconvert", "-o",
                "JobID,NodeList,MaxRSS,TotalCPU,MaxRSSNode")
    rows = {ln.split("|")[0]: ln.split("|") for ln in r.stdout.splitlines()}
    for step, node in ((f"{jid}.0", "ma"), (f"{jid}.1", "mb")):
        _id, nodelist, maxrss, total_cpu, rss_node = rows[step]
        assert nodelist == node and rss_node == node, rows
        assert int(maxrss.rstrip("K")) > 50 * 1024, rows  # the 60 MiB buffer
        minutes, seconds = total_cpu.split(":")[-2:]
        assert float(seconds) + 60 * int(minutes) >= 0.25, rows


def test_ctrl_c_once_reports_twice_kills_the_step(two: TwoNodes) -> None:
    marker = f"corral-int-{os.getpid()}"
    p = subprocess.Popen(["srun", "-N2", "bash", "-c", f"exec -a {marker} sleep 300"],
                         env=two.env, cwd=two.work, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)

    def tasks() -> int:
        return _count(marker)

    try:
        wait_for(lambda: tasks() == 2, 30, what="both tasks")
        p.send_signal(signal.SIGINT)
        time.sleep(1.5)  # a second interrupt only counts within one second of the first
        assert p.poll() is None and tasks() == 2  # one Ctrl-C: a status report only
        p.send_signal(signal.SIGINT)
        time.sleep(0.2)
        p.send_signal(signal.SIGINT)
        _out, err = p.communicate(timeout=30)
        assert "srun: interrupt (one more within 1 sec to abort)" in err, err
        assert "tasks 0-1: running" in err and "forcing job termination" in err, err
        assert p.returncode == 128 + signal.SIGKILL, err
        wait_for(lambda: tasks() == 0, 15, what="the tasks to end")
    finally:
        if p.poll() is None:
            p.kill()


def test_sstat_shows_a_running_step_on_both_nodes(two: TwoNodes) -> None:
    burn = two.work / "burn.py"
    burn.write_text("import time\nb = bytearray(40 << 20)\nt = time.time()\n"
                    "while time.time() - t < 30:\n    pass\n")
    jid = two.sbatch(f"#!/bin/bash\nsrun -N2 -n2 {sys.executable} {burn}\n",
                     "-N2", "-w", "ma,mb", "-o", "/dev/null")
    try:
        def sampled() -> list[str] | None:
            r = two.run("sstat", "-n", "-P", "-j", f"{jid}.0", "-o",
                        "JobID,NTasks,AveCPU,MaxRSS,MaxRSSNode")
            with two.client() as c:
                nodes = c.job_usage(jid).get("nodes") or {}
            both = all("0" in (nodes.get(n) or {}).get("steps", {}) for n in ("ma", "mb"))
            f = r.stdout.strip().split("|")
            return f if both and len(f) == 5 and f[2] not in ("", "00:00:00") else None
        f = wait_for(sampled, 30, interval=0.2, what="both nodes' samples of step 0")
        assert f[0] == f"{jid}.0" and f[1] == "2" and f[4] in ("ma", "mb"), f
        kib = float(f[3][:-1]) * {"K": 1, "M": 1024, "G": 1 << 20}[f[3][-1]]
        assert kib >= 40 * 1024, f  # one task's 40 MiB buffer (the biggest task's)
        r = two.run("sstat", "-i", "-n", "-P", "-j", f"{jid}.0")
        _id, nodelist, pids = r.stdout.strip().split("|")
        assert nodelist == "ma,mb" and len(pids.split(",")) >= 2, r.stdout
    finally:
        two.run("scancel", str(jid))
