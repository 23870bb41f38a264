"""qsub / qstat / qdel: output shapes the PBS clients parse, and the error cases."""

from __future__ import annotations

import json
import re

from corral.shims.pbs import server_name
from tests.shims.fakes import FakeClient, job
from tests.shims.scenario import NOW, run

DASK_PBS = """#!/usr/bin/env bash
#PBS -N dask-worker
#PBS -l select=1:ncpus=2:mem=2048MB
#PBS -l walltime=00:02:00
#PBS -V
echo hi
"""


def records() -> list[dict]:  # type: ignore[type-arg]
    return [
        job(10, name="dask-worker", state="RUNNING", nodes=["vm"], start_time=NOW - 5,
            partition="batch", num_cpus=2),
        job(11, name="queued", partition="batch"),
        job(12, name="done", state="COMPLETED", exit_code=0, start_time=NOW - 9,
            end_time=NOW - 8, nodes=["vm"], partition="batch"),
        job(20, name="arr", array=20, task=0, state="RUNNING", nodes=["vm"],
            start_time=NOW - 3, partition="batch"),
        job(21, name="arr", array=20, task=1, partition="batch"),
    ]


def test_qsub_prints_id_dot_server() -> None:
    c = FakeClient()
    out, err, rc = run("qsub", ["job.sh"], c, local=False, files={"job.sh": (True, DASK_PBS)},
                       env={"HOME": "/root", "PATH": "/usr/bin"})
    assert (out, err, rc) == (f"100.{server_name()}\n", "", 0)
    sub = c.submitted[0]
    assert sub["dialect"] == "pbs" and sub["spec"]["cpus_per_task"] * (
        sub["spec"]["ntasks"] or 1) == 2
    assert sub["spec"]["time_limit_s"] == 120
    assert re.search(r"(?P<job_id>\d+)", out).group("job_id") == "100"  # type: ignore[union-attr]
    out, err, rc = run("qsub", ["-J", "0-3", "job.sh"], c, local=False,
                       files={"job.sh": (True, DASK_PBS)})
    assert out == f"101[].{server_name()}\n"


def test_qsub_errors() -> None:
    out, err, rc = run("qsub", ["-l", "walltime=abc", "job.sh"], FakeClient(), local=False,
                       files={"job.sh": (True, DASK_PBS)})
    assert rc == 166 and "Illegal attribute or resource value" in err
    out, err, rc = run("qsub", ["missing.sh"], FakeClient(), local=False,
                       files={"missing.sh": (False, "No such file or directory")})
    assert rc == 1 and "No such file" in err


def test_qstat_table_and_states() -> None:
    s = server_name()
    out, err, rc = run("qstat", [], FakeClient(records()))
    lines = out.splitlines()
    assert lines[0].startswith("Job id            Name             User")
    by_id = {ln.split()[0]: ln.split() for ln in lines[2:]}
    assert by_id[f"10.{s}"[:16] if len(f"10.{s}") <= 16 else f"10.{s}"[:15] + "*"][4] == "R"
    assert all(not k.startswith("12.") for k in by_id)  # finished hidden without -x
    out, err, rc = run("qstat", ["-x", f"12.{s}"], FakeClient(records()))
    assert rc == 0 and out.splitlines()[2].split()[4] == "F"


def test_qstat_errors() -> None:
    s = server_name()
    out, err, rc = run("qstat", ["999"], FakeClient(records()))
    assert (err, rc) == ("qstat: Unknown Job Id 999\n", 153)
    out, err, rc = run("qstat", [f"12.{s}", "10"], FakeClient(records()))
    assert rc == 35 and err == (f"qstat: 12.{s} Job has finished, use -x or -H to obtain "
                                "historical job information\n")
    assert "dask-worker" in out


def test_qstat_full_json_and_server() -> None:
    s = server_name()
    out, err, rc = run("qstat", ["-x", "-f", "-F", "json", "10", "12", "20"],
                       FakeClient(records()))
    doc = json.loads(out)
    assert rc == 0 and doc["pbs_server"] == s
    states = {k: v["job_state"] for k, v in doc["Jobs"].items()}
    assert states == {f"10.{s}": "R", f"12.{s}": "F", f"20[].{s}": "B"}
    assert doc["Jobs"][f"12.{s}"]["Exit_status"] == 0
    out, err, rc = run("qstat", ["-f", f"@{s}"], FakeClient(records()))
    pairs = re.findall(r"Job Id: (\S+)\n(?:.*\n)*?    job_state = (\w)", out)
    assert (f"10.{s}", "R") in pairs and (f"11.{s}", "Q") in pairs
    assert "    exec_host = vm/0*2" in out.splitlines()
    out, err, rc = run("qstat", ["-B", "-f"], FakeClient(records()))
    assert out.splitlines()[0] == f"Server: {s}"


def test_qdel() -> None:
    s = server_name()
    c = FakeClient(records())
    out, err, rc = run("qdel", ["10", f"11.{s}", "20[1]"], c)
    assert rc == 0 and ("cancel", "10") in c.calls and ("cancel", "20_1") in c.calls
    out, err, rc = run("qdel", ["999"], c)
    assert (err, rc) == ("qdel: Unknown Job Id 999\n", 153)
