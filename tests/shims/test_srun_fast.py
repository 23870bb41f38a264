"""The compiled srun (``launcher_srun.c`` + ``corral.shims.srun_fast``) against the Python
srun (``corral.shims.steplaunch``), on a real two-node cluster (controller, two agents,
their step processes): the same steps, run once by each, print the same and exit the same.

``CORRAL_SHIM_LOCAL=1`` makes the launcher hand over to the Python srun, which starts a
step through the agents with the same protocol; so every difference here is the relay's.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import wait_for
from tests.e2e.test_multinode_steps import TwoNodes

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc)")

# (name, shell command; its stdin is /dev/null unless the command pipes one in)
CASES = [
    ("label", "srun -N2 -n4 -l sh -c 'echo out $SLURM_PROCID; echo err $SLURM_PROCID >&2'"),
    ("partial-line", "srun -N2 -n2 -l printf 'no newline'"),
    ("codes", "srun -N2 -n3 sh -c 'exit $((SLURM_PROCID + 3))'"),
    ("same-code", "srun -N2 -n4 sh -c 'exit 9'"),
    ("signal", "srun -N2 -n2 sh -c 'kill -TERM $$'"),
    ("stdin-all", "printf 'hello\\n' | srun -N2 -n2 cat"),
    ("stdin-one", "printf 'only one\\n' | srun -N2 -n2 -i 1 sh -c 'cat; echo task $SLURM_PROCID'"),
    ("kill-on-bad-exit", "srun -N2 -n2 -K sh -c '[ $SLURM_PROCID = 0 ] && exit 1; exec sleep 30'"),
    ("too-many-nodes", "srun -N3 -n3 true"),
    ("bad-option", "srun --no-such-option true"),
    ("no-command", "srun -N2"),
    ("mpi-list", "srun --mpi=list"),
    ("version", "srun --version"),
    ("env", "srun -N2 -n2 sh -c 'echo $SLURM_PROCID $SLURM_NODEID $SLURMD_NODENAME "
            "$SLURM_STEP_NUM_TASKS'"),
]
UNORDERED = {"label", "partial-line", "codes", "stdin-all", "stdin-one", "env", "same-code",
             "signal"}


def job_script(out: Path) -> str:
    lines = ["#!/bin/bash", "cd " + str(out)]
    for mode, prefix in (("c", ""), ("py", "CORRAL_SHIM_LOCAL=1 ")):
        for name, cmd in CASES:
            run = cmd.replace("srun ", f"{prefix}srun ", 1) if "| srun" not in cmd else \
                cmd.replace("| srun ", f"| {prefix}srun ")
            lines.append(f"( {run} ) >{mode}.{name}.out 2>{mode}.{name}.err </dev/null; "
                         f"echo $? >{mode}.{name}.rc")
    # the compiled srun stays itself: its process is the launcher, not a Python interpreter
    lines += ["srun -N2 -n2 sleep 3 & pid=$!",
              "for i in $(seq 200); do [ -e /proc/$pid/exe ] && break; sleep 0.01; done",
              "readlink /proc/$pid/exe >exe.txt; wait $pid; echo $? >exe.rc",
              # ... and the nodes run the compiled step process (corral.agent.stepbin)
              "srun -N2 -n2 sh -c 'readlink /proc/$PPID/exe' >stepd.txt",
              # a signal reaches every task through the relay
              "rm -f ready.*",
              "srun -N2 -n2 sh -c 'trap \"echo usr1 $SLURM_PROCID; exit 7\" USR1; "
              "touch ready.$SLURM_PROCID; while :; do sleep 0.05; done' >sig.out 2>sig.err &",
              "pid=$!",
              "for i in $(seq 3000); do [ -e ready.0 ] && [ -e ready.1 ] && break; "
              "sleep 0.02; done",
              "kill -USR1 $pid; wait $pid; echo $? >sig.rc"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TwoNodes, Path, int]]:
    root = tmp_path_factory.mktemp("srunfast")
    two = TwoNodes(root)
    two.up()
    out = root / "out"
    out.mkdir()
    os.chmod(out, 0o777)
    try:
        job = two.sbatch(job_script(out), "-N2", "-n4", "-t", "5", "-o", str(out / "job.log"))
        rec = two.wait_done(job, timeout=240)
        assert rec["state"] == "COMPLETED", (rec, (out / "job.log").read_text(), two.logs())
        yield two, out, job
    finally:
        two.down()


def _read(out: Path, mode: str, name: str) -> tuple[str, str, str]:
    """stdout, stderr (step ids, which differ between the two runs, as ``J.S``), status."""
    o, e, rc = ((out / f"{mode}.{name}.{ext}").read_text() for ext in ("out", "err", "rc"))
    return o, re.sub(r"StepId=\d+\.\d+", "StepId=J.S", e), rc


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_compiled_srun_prints_and_exits_as_the_python_one(
        ran: tuple[TwoNodes, Path, int], name: str) -> None:
    _two, out, _job = ran
    c_out, c_err, c_rc = _read(out, "c", name)
    p_out, p_err, p_rc = _read(out, "py", name)
    assert c_rc == p_rc, (name, c_err, p_err)
    if name in UNORDERED:  # tasks on two nodes: their lines interleave in any order
        assert sorted(c_out.splitlines()) == sorted(p_out.splitlines()), name
        assert sorted(c_err.splitlines()) == sorted(p_err.splitlines()), name
    else:
        assert (c_out, c_err) == (p_out, p_err), name


def test_cases_say_what_slurm_says(ran: tuple[TwoNodes, Path, int]) -> None:
    _two, out, _job = ran
    o, e, rc = _read(out, "c", "label")
    assert sorted(o.splitlines()) == ["0: out 0", "1: out 1", "2: out 2", "3: out 3"]
    assert rc.strip() == "0"
    o, e, rc = _read(out, "c", "partial-line")
    assert o == "0: no newline\n1: no newline\n"
    o, e, rc = _read(out, "c", "codes")
    assert rc.strip() == "5"
    assert "srun: error: ma: tasks 0-1: Exited with exit code" not in e  # codes differ
    assert "srun: error: ma: task 0: Exited with exit code 3" in e
    assert "srun: error: mb: task 2: Exited with exit code 5" in e
    o, e, rc = _read(out, "c", "same-code")
    assert sorted(e.splitlines()) == ["srun: error: ma: tasks 0-1: Exited with exit code 9",
                                      "srun: error: mb: tasks 2-3: Exited with exit code 9"]
    o, e, rc = _read(out, "c", "signal")
    assert rc.strip() == "143" and "Terminated" in e
    o, e, rc = _read(out, "c", "stdin-all")
    assert o == "hello\nhello\n"
    o, e, rc = _read(out, "c", "stdin-one")
    assert sorted(o.splitlines()) == ["only one", "task 0", "task 1"]
    o, e, rc = _read(out, "c", "kill-on-bad-exit")
    assert "(--kill-on-bad-exit)" in e and rc.strip() != "0"
    o, e, rc = _read(out, "c", "too-many-nodes")
    assert rc.strip() == "1" and "Requested node configuration is not available" in e
    o, e, rc = _read(out, "c", "env")
    assert sorted(o.splitlines()) == ["0 0 ma 2", "1 1 mb 2"]


def test_the_compiled_srun_runs_without_python(ran: tuple[TwoNodes, Path, int]) -> None:
    _two, out, _job = ran
    exe = (out / "exe.txt").read_text().strip()
    assert exe and "python" not in os.path.basename(exe), exe
    assert (out / "exe.rc").read_text().strip() == "0"


def test_the_nodes_run_the_compiled_step_process(ran: tuple[TwoNodes, Path, int]) -> None:
    _two, out, _job = ran
    lines = (out / "stepd.txt").read_text().split()
    assert len(lines) == 2 and all("corral-stepd-" in ln for ln in lines), lines


def test_a_signal_reaches_every_task(ran: tuple[TwoNodes, Path, int]) -> None:
    _two, out, _job = ran
    assert sorted((out / "sig.out").read_text().splitlines()) == ["usr1 0", "usr1 1"]
    assert (out / "sig.rc").read_text().strip() == "7"


def test_steps_are_recorded_with_their_end_and_usage(ran: tuple[TwoNodes, Path, int]) -> None:
    two, _out, job = ran
    with two.client() as c:
        steps = c.job(job).get("steps") or []
    done = [s for s in steps if s.get("name") == "sleep"]
    assert done, steps
    for s in done:
        assert s["state"] == "COMPLETED" and s["exit_code"] == 0
        assert s["end_time"] and s["end_time"] >= s["start_time"]
        assert sorted((s.get("usage") or {}).get("nodes", {})) == ["ma", "mb"], s
    failed = [s for s in steps if s.get("name") == "sh" and s["state"] == "FAILED"]
    assert failed  # the codes case, at least


def test_steps_of_an_arrays_first_task_are_its_own(ran: tuple[TwoNodes, Path, int]) -> None:
    """The first task of an array has the array's id as its own (SLURM_JOB_ID): its step
    belongs to that task, not to 'the array' (which names every task)."""
    two, out, _job = ran
    arr = two.sbatch("#!/bin/bash\nsrun -n1 true\n", "--array=0-1", "-n1", "-t", "2",
                     "-o", str(out / "arr-%a.log"))
    with two.client() as c:
        tasks = [j for j in c.jobs(include_finished=True) if j.get("array_job_id") == arr]
    assert len(tasks) == 2
    for t in tasks:
        ref = f"{arr}_{t['array_task_id']}"  # a pending task may have no id of its own yet
        with two.client() as c:
            def done(ref: str = ref) -> dict[str, object] | None:
                j = c.job(ref)
                return j if j["state"] not in ("PENDING", "RUNNING", "COMPLETING") else None
            rec = wait_for(done, 120, interval=0.1, what=f"array task {ref}")
            assert rec["state"] == "COMPLETED", (rec, two.logs())
            steps = c.job(ref).get("steps") or []
        assert [s["name"] for s in steps] == ["true"], (t, steps)
