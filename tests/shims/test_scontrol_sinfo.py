"""scontrol and sinfo against the captured Slurm 22.05 outputs."""

from __future__ import annotations

from typing import Any

import pytest

from tests.shims.fakes import FakeClient, captured, job
from tests.shims.scenario import T0, finished_records, queue_records, run

NODE: dict[str, Any] = {
    "name": "vm", "state": "MIXED", "reason": "", "partitions": ["debug"], "cpus": 64,
    "sockets": 1, "cores_per_socket": 64, "threads_per_core": 1, "mem_mb": 16000, "gpus": 0,
    "gpu_types": {}, "features": [], "gres": {}, "alloc_cpus": 5, "alloc_mem_mb": 500,
    "alloc_gpus": 0, "jobs": [], "arch": "x86_64", "weight": 1, "connected": True,
}
PART: dict[str, Any] = {
    "name": "debug", "nodes": ["vm"], "nodelist": "vm", "default": True, "state": "UP",
    "max_time_s": None, "default_time_s": None, "max_nodes": None, "min_nodes": 0,
    "priority_tier": 1, "priority_job_factor": 1, "preempt_mode": "OFF", "grace_time_s": 0,
    "exclusive": False, "allow_accounts": None, "allow_qos": None, "total_cpus": 64,
    "total_nodes": 1, "total_mem_mb": 16000,
}


def client() -> FakeClient:
    recs = queue_records() + finished_records()
    for r in recs:
        r["stdout"] = f"/var/tmp/slurm-anchor/work/capture/slurm-{r['job_id']}.out"
        r["submit_time"] = r["eligible_time"] = T0 - 3
    return FakeClient(recs, nodes=[NODE], partitions=[PART])


@pytest.mark.parametrize("name", [
    "sinfo.txt", "sinfo_s.txt", "sinfo_N_l.txt", "sinfo_o.txt", "scontrol_show_partition.txt",
    "err_scontrol_show_job_nonexistent.txt",
])
def test_matches_capture(name: str) -> None:
    argv, expected, rc = captured(name)
    cmd = "sinfo" if name.startswith("sinfo") else "scontrol"
    out, err, got = run(cmd, argv, client())
    assert (out + err, got) == (expected, rc)


def test_show_job_running_block() -> None:
    _, expected, _ = captured("scontrol_show_job_running.txt")
    out, err, rc = run("scontrol", ["show", "job", "1"], client())
    exp = expected.splitlines()
    got = out.splitlines()
    assert len(got) == len(exp)
    differ = [(a, b) for a, b in zip(got, exp, strict=True) if a != b]
    # allowed differences: allocation node and the submit/eligible/accrue instants
    assert all(any(k in b for k in ("AllocNode", "SubmitTime", "AccrueTime", "Priority"))
               for _, b in differ), differ


def test_show_job_oneliner_and_array() -> None:
    out, _, _ = run("scontrol", ["show", "job", "-o", "1"], client())
    assert out.startswith("JobId=1 JobName=long UserId=root(0)") and out.endswith("Power= \n")
    out, _, _ = run("scontrol", ["show", "job", "4"], client())
    heads = [ln for ln in out.splitlines() if ln.startswith("JobId=")]
    assert heads[0] == "JobId=4 ArrayJobId=4 ArrayTaskId=3-6%2 ArrayTaskThrottle=2 " \
                       "JobName=arr_limited"
    assert len(heads) == 3
    out, _, _ = run("scontrol", ["show", "job", "4_2"], client())
    assert out.startswith("JobId=19 ArrayJobId=4 ArrayTaskId=2 ArrayTaskThrottle=2 ")


def test_hostnames_and_config() -> None:
    out, _, rc = run("scontrol", ["show", "hostnames", "node[01-03,7]"], FakeClient())
    assert (out, rc) == ("node01\nnode02\nnode03\nnode7\n", 0)
    out, _, _ = run("scontrol", ["show", "hostname"], FakeClient(),
                    env={"SLURM_JOB_NODELIST": "a[1-2],b"})
    assert out == "a1\na2\nb\n"
    out, _, _ = run("scontrol", ["show", "hostlist", "n1,n2,n3,x"], FakeClient())
    assert out == "n[1-3],x\n"
    out, _, _ = run("scontrol", ["show", "config"], FakeClient())
    lines = out.splitlines()
    assert "MinJobAge               = 300 sec" in lines
    assert "MaxArraySize            = 4001" in lines


def test_hold_release_requeue_errors() -> None:
    c = FakeClient([job(8, state="COMPLETED")])

    def refuse(action: str):  # type: ignore[no-untyped-def]
        def f(ids, **kw):  # type: ignore[no-untyped-def]
            return [{"id": str(i), "ok": False, "code": "conflict",
                     "message": "job 8 has already finished"} for i in ids]
        return f

    c.hold = refuse("hold")  # type: ignore[method-assign]
    argv, expected, rc = captured("err_scontrol_hold_finished.txt")
    out, err, got = run("scontrol", argv, c)
    assert (out + err, got) == (expected, rc)
    argv, expected, rc = captured("err_scontrol_release_nonexistent.txt")
    out, err, got = run("scontrol", argv, FakeClient())
    assert (out + err, got) == (expected, rc)
    c = FakeClient([job(8, state="COMPLETED")])
    out, err, rc = run("scontrol", ["requeue", "8"], c)
    assert (out, err, rc) == ("", "", 0) and ("requeue", "8") in c.calls


def test_update() -> None:
    c = FakeClient([job(5, time_limit_s=600)])
    out, err, rc = run("scontrol", ["update", "JobId=5", "TimeLimit=+10", "Name=x"], c)
    assert rc == 0, err
    assert ("update", ("5", {"time_limit_s": 1200, "name": "x"})) in c.calls
    out, err, rc = run("scontrol", ["update", "JobId=5", "Bogus=1"], c)
    assert rc == 1 and "not supported" in err


def test_sinfo_client_shapes() -> None:
    out, _, _ = run("sinfo", ["-o", "%C"], client())
    assert out == "CPUS(A/I/O/T)\n5/59/0/64\n"
    assert out.split()[1].split("/")[1] == "59"  # dask-jobqueue's parse
    out, _, _ = run("sinfo", ["-o", "%P"], client())
    assert out == "PARTITION\ndebug*\n"


def test_scancel() -> None:
    for name in ("err_scancel_bad_id.txt", "err_scancel_nonexistent.txt",
                 "scancel_nonexistent_verbose.txt"):
        argv, expected, rc = captured(name)
        out, err, got = run("scancel", argv, FakeClient())
        assert (out + err, got) == (expected, rc), name
    c = FakeClient([job(7, state="RUNNING")])
    out, err, rc = run("scancel", ["7", "--signal", "SIGUSR2"], c)
    assert rc == 0 and ("cancel", "7") in c.calls
    out, err, rc = run("scancel", ["--signal=USR2", "999"], c)
    assert rc == 1 and "Kill job error on job id 999: Invalid job id specified" in err
    out, err, rc = run("scancel", ["-s", "NOPE", "7"], c)
    assert (rc, err) == (1, "scancel: error: Invalid job signal: NOPE\n")
    c = FakeClient([job(7, state="RUNNING", name="a"), job(8, name="b")])
    out, err, rc = run("scancel", ["-n", "b"], c)
    assert rc == 0 and ("cancel", "8") in c.calls and ("cancel", "7") not in c.calls
