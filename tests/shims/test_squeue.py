"""squeue against the captured Slurm 22.05 outputs (same jobs, same clock)."""

from __future__ import annotations

import pytest

from tests.shims.fakes import FakeClient, captured, job
from tests.shims.scenario import NOW, finished_records, queue_records, run


@pytest.mark.parametrize("name", [
    "squeue.txt", "squeue_l.txt", "squeue_o_i_T.txt", "squeue_h_o_i.txt", "squeue_r.txt",
    "err_squeue_p_nonexistent.txt", "err_squeue_j_nonexistent.txt",
])
def test_matches_capture(name: str) -> None:
    argv, expected, rc = captured(name)
    out, err, got_rc = run("squeue", argv, FakeClient(queue_records()))
    assert out + err == expected
    assert got_rc == rc


def test_array_job_by_base_id() -> None:
    argv, expected, rc = captured("squeue_j_array.txt")
    out, err, got_rc = run("squeue", argv, FakeClient(queue_records()))
    # Slurm printed the running tasks in hash order (4_2 before 4_1); ours sort by priority
    assert sorted(out.splitlines()) == sorted(expected.splitlines())
    assert got_rc == rc == 0


def test_state_all_includes_finished() -> None:
    argv, expected, rc = captured("squeue_t_all.txt")
    out, err, got_rc = run("squeue", argv, FakeClient(queue_records() + finished_records()))
    assert out == expected and got_rc == rc


def test_default_hides_finished_even_with_j() -> None:
    client = FakeClient(finished_records())
    out, err, rc = run("squeue", ["-h", "-j", "8", "-o", "%i %t"], client)
    assert (out, err, rc) == ("", "", 0)
    out, err, rc = run("squeue", ["-h", "-j", "8", "-t", "all", "-o", "%i %t"], client)
    assert out == "8 CD\n"


def test_clients_formats() -> None:
    client = FakeClient(queue_records() + finished_records())
    # Parsl fallback: --job takes the next word as its list
    out, _, rc = run("squeue", ["--noheader", "--format=%i %t", "--job", "1,25,9"], client)
    assert rc == 0 and out.splitlines() == ["25 PD", "1 R"]
    # snakemake
    out, _, _ = run("squeue", ["--format=%i|%T", "--states=all", "--noheader",
                               "--name", "fail"], client)
    assert out == "9|FAILED\n"
    # batchspawner
    out, _, _ = run("squeue", ["-h", "-j", "1", "-o", "%T %B"], client)
    assert out == "RUNNING vm\n"
    # Nextflow
    out, _, _ = run("squeue", ["--noheader", "-o", "%i %t", "-t", "all", "-u", "root"], client)
    assert "7 TO" in out.splitlines() and "4_[3-6%2] PD" in out.splitlines()


def test_errors() -> None:
    client = FakeClient(queue_records())
    out, err, rc = run("squeue", ["-t", "bogus"], client)
    assert rc == 1 and err.startswith("squeue: error: Invalid job state specified: bogus\n")
    out, err, rc = run("squeue", ["-j", "abc"], client)
    assert (rc, err) == (1, "squeue: error: Invalid job id: abc\n")
    out, err, rc = run("squeue", ["--bogus"], client)
    assert rc == 1 and err.startswith("squeue: unrecognized option '--bogus'")
    out, err, rc = run("squeue", ["-u", "no_such_user_xyz"], client)
    assert (rc, err) == (1, "squeue: error: Invalid user: no_such_user_xyz\n")


def test_long_format_fields() -> None:
    client = FakeClient([job(5, name="x", partition="debug", comment="hi", workdir="/w",
                             state="RUNNING", nodes=["vm"], start_time=NOW - 3700)])
    out, _, _ = run("squeue", ["-h", "-O", "JobID:6,State:.10,Comment,WorkDir:4|"], client)
    assert out == "5        RUNNINGhi                  /w  |\n"
    out, _, _ = run("squeue", ["-h", "-o", "%M|%L|%l"], client)
    assert out == "1:01:40|UNLIMITED|UNLIMITED\n"


def test_field_width_is_capped() -> None:
    """``%99999999i`` must not make the controller (where the shims run) build hundreds
    of MB: widths are capped at 1024 (docs/shims.md, issue 11); non-ASCII digits are not
    a width."""
    client = FakeClient(queue_records())
    out, _, rc = run("squeue", ["-h", "-j", "25", "-o", "%99999999i|%.99999999j|"], client)
    assert rc == 0 and len(out) == 2 * 1024 + 3, len(out)
    out, _, rc = run("squeue", ["-h", "-j", "25", "-O", "JobID:99999999"], client)
    assert rc == 0 and len(out) <= 1025
    out, _, rc = run("squeue", ["-h", "-j", "25", "-o", "%\u00b9i"], client)
    assert rc == 0 and len(out) < 100
    out, _, rc = run("sinfo", ["-h", "-o", "%99999999P"], client)
    assert rc == 0 and all(len(line) <= 1024 for line in out.splitlines())


def test_configuring_job_while_its_nodes_boot() -> None:
    """A running job on nodes that are still booting: CF/CONFIGURING in squeue and
    scontrol, matched by -t CF and by -t R (its base state), RUNNING in sacct."""
    recs = [job(40, state="RUNNING", start_time=1000.0, nodes=["cloud1"], configuring=True),
            job(41, state="RUNNING", start_time=1000.0, nodes=["n1"])]
    c = FakeClient(recs)
    out, _, rc = run("squeue", ["-h", "-o", "%i %t %T %R"], c)
    assert rc == 0 and out.splitlines() == ["40 CF CONFIGURING cloud1", "41 R RUNNING n1"]
    assert run("squeue", ["-h", "-t", "CF", "-o", "%i"], c)[0].split() == ["40"]
    assert run("squeue", ["-h", "-t", "configuring", "-o", "%i"], c)[0].split() == ["40"]
    assert run("squeue", ["-h", "-t", "R", "-o", "%i"], c)[0].split() == ["40", "41"]
    assert "JobState=CONFIGURING " in run("scontrol", ["show", "job", "40"], c)[0]
    out, _, _ = run("sacct", ["-n", "-X", "-P", "-j", "40", "-o", "jobid,state"], c)
    assert out.splitlines() == ["40|RUNNING"]
