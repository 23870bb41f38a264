"""The documented fidelity choices (docs/shims.md), each pinned."""

from __future__ import annotations

from tests.shims.fakes import FakeClient, job
from tests.shims.scenario import NOW, run


def cancelled() -> FakeClient:
    return FakeClient([job(5, state="CANCELLED", nodes=["vm"], start_time=NOW - 5,
                           end_time=NOW - 4, end_reason="cancelled by root", exit_code=0)])


def test_sacct_cancelled_state_is_plain_by_default() -> None:
    out, _, rc = run("sacct", ["-o", "JobID,State", "-P", "-n", "-X", "-j", "5"], cancelled())
    assert (out, rc) == ("5|CANCELLED\n", 0)
    # snakemake's failure set has the exact string
    assert out.strip().split("|")[1] in {"BOOT_FAIL", "CANCELLED", "DEADLINE", "FAILED",
                                         "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT", "ERROR"}


def test_sacct_cancelled_by_uid_on_request() -> None:
    env = {"CORRAL_SACCT_CANCELLED_BY": "1"}
    out, _, _ = run("sacct", ["-o", "JobID,State", "-P", "-n", "-X", "-j", "5"], cancelled(),
                    env=env)
    assert out == "5|CANCELLED by 0\n"
    out, _, _ = run("sacct", ["-X", "-n", "-j", "5", "--format=jobid,state%20"], cancelled(),
                    env=env)
    assert out == "5                  CANCELLED by 0 \n"  # Parsl's whitespace split still works
    out, _, _ = run("sacct", ["-X", "-n", "-j", "5"], cancelled(), env=env)
    assert "CANCELLED+" in out


def test_array_jobidraw_is_the_task_id() -> None:
    c = FakeClient([job(8, array=8, task=1, state="COMPLETED", exit_code=0),
                    job(9, array=8, task=2, state="RUNNING", nodes=["vm"], start_time=NOW)])
    out, _, _ = run("sacct", ["-X", "-P", "-n", "-o", "JobID,JobIDRaw,State", "-j", "8"], c)
    assert out.splitlines() == ["8_1|8|COMPLETED", "8_2|9|RUNNING"]


def test_pending_array_remainder_parses_with_submitit_regex() -> None:
    import re

    c = FakeClient([job(20 + i, array=20, task=i, array_max_running=2,
                        reason="JobArrayTaskLimit") for i in range(3, 7)])
    out, _, _ = run("sacct", ["-o", "JobID,State,NodeList", "--parsable2", "-j", "20"], c)
    lines = out.splitlines()
    assert lines == ["JobID|State|NodeList", "20_[3-6%2]|PENDING|None assigned"]
    m = re.match(r"(?P<main_id>\d+)_\[(?P<arrays>(\d+(-\d+)?(,)?)+)(\%\d+)?\]",
                 lines[1].split("|")[0])
    assert m is not None and m.group("arrays") == "3-6"


def test_unknown_positional_arguments_fail_like_sacct() -> None:
    # snakemake's account guess passes "| tail -1" as arguments; sacct must exit 1
    out, err, rc = run("sacct", ["-nu", "root", "-o", "Account%256", "|", "tail", "-1"],
                       FakeClient())
    assert rc == 1 and out == ""


def test_versions() -> None:
    for cmd in ("squeue", "sacct", "sbatch", "sinfo", "scancel"):
        out, _, rc = run(cmd, ["--version"], FakeClient())
        assert (out, rc) == ("slurm 22.05.8\n", 0), cmd
    out, _, _ = run("qstat", ["--version"], FakeClient())
    assert out == "pbs_version = 23.06.06\n"


def test_refused_features_say_so() -> None:
    # (squeue -i iterates since issue 20: tests/shims/test_workflow_status.py)
    for cmd, argv in (("squeue", ["--json"]), ("sacct", ["--json"]),
                      ("sbatch", ["--test-only", "--wrap", "true"])):
        out, err, rc = run(cmd, argv, FakeClient())
        assert rc == 1 and "not supported" in err, (cmd, argv, err)
