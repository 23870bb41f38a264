"""Job steps through the real daemons: numbering, ends, errors, restarts, requeues."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.client import CorralError
from tests.e2e.cluster import Cluster, wait_for


def _gated(c: Cluster, name: str) -> tuple[int, Path]:
    gate = c.work / f"gate-{name}"
    jid = c.submit(f"while [ ! -e {gate} ]; do sleep 0.05; done", name=name)
    c.wait_state(jid, "RUNNING")
    return jid, gate


def test_steps_are_numbered_recorded_and_validated(cluster: Cluster) -> None:
    c = cluster
    jid, gate = _gated(c, "steps")
    cl = c.client
    assert cl.start_step(jid, ["/bin/true"], ntasks=2, num_cpus=2, pid=1234) == 0
    assert cl.start_step(jid, ["/bin/false", "x"]) == 1
    assert cl.start_step(str(jid), ["hostname"], name="named") == 2
    done0 = cl.end_step(jid, 0)
    assert (done0["state"], done0["exit_code"], done0["signal"]) == ("COMPLETED", 0, 0)
    assert cl.end_step(jid, 1, exit_code=3)["state"] == "FAILED"
    # a second end report changes nothing
    assert cl.end_step(jid, 1, exit_code=0)["state"] == "FAILED"
    steps = cl.job(jid)["steps"]
    assert [(s["step_id"], s["name"], s["state"]) for s in steps] == [
        (0, "true", "COMPLETED"), (1, "false", "FAILED"), (2, "named", "RUNNING")]
    assert steps[0]["ntasks"] == 2 and steps[0]["pid"] == 1234
    assert steps[0]["nodes"] == ["testnode"] and steps[1]["argv"] == ["/bin/false", "x"]
    assert steps[2]["end_time"] is None
    # precise errors
    with pytest.raises(CorralError) as err:
        cl.end_step(jid, 7)
    assert err.value.code == "not_found" and "no step 7" in err.value.message
    with pytest.raises(CorralError) as err:
        cl.start_step(jid, ["x"], ntasks=0)
    assert err.value.code == "invalid" and "ntasks" in err.value.message
    with pytest.raises(CorralError) as err:
        cl.request("POST", f"/jobs/{jid}/steps/0/end", {"state": "BOGUS"})
    assert err.value.code == "invalid" and "state must be one of" in err.value.message
    with pytest.raises(CorralError) as err:
        cl.start_step(999999, ["x"])
    assert err.value.code == "not_found" and err.value.slurm == "Invalid job id specified"
    held = c.submit("true", hold=True)
    with pytest.raises(CorralError) as err:
        cl.start_step(held, ["x"])
    assert err.value.code == "conflict" and "pending" in err.value.message
    cl.cancel([held])
    # the job ends with step 2 still open: it is closed CANCELLED
    gate.write_text("go")
    assert c.wait_done(jid)["state"] == "COMPLETED"
    steps = cl.job(jid)["steps"]
    assert steps[2]["state"] == "CANCELLED" and steps[2]["end_time"] is not None
    with pytest.raises(CorralError) as err:
        cl.start_step(jid, ["x"])
    assert err.value.code == "conflict"
    hist = cl.history(ids=[jid])
    assert [s["state"] for s in hist[0]["steps"]] == ["COMPLETED", "FAILED", "CANCELLED"]


def test_steps_survive_a_controller_restart(fresh_cluster: Cluster) -> None:
    c = fresh_cluster
    jid, gate = _gated(c, "restart")
    done = c.submit("true", name="finished-before")
    c.wait_done(done)
    assert c.client.start_step(jid, ["a"]) == 0
    c.client.end_step(jid, 0, exit_code=2)
    assert c.client.start_step(jid, ["b"]) == 1
    pid = c.controller_pid()
    assert pid is not None
    c.kill9(pid)
    c.client.close()
    c.start_controller()
    c.client.close()
    steps = c.client.job(jid)["steps"]
    assert [(s["step_id"], s["state"]) for s in steps] == [(0, "FAILED"), (1, "RUNNING")]
    assert c.client.start_step(jid, ["c"]) == 2  # numbering continues after the restart
    c.client.end_step(jid, 1)
    gate.write_text("go")
    assert c.wait_done(jid)["state"] == "COMPLETED"
    hist = c.client.history(ids=[jid])[0]
    assert [(s["step_id"], s["state"]) for s in hist["steps"]] == [
        (0, "FAILED"), (1, "COMPLETED"), (2, "CANCELLED")]
    assert c.client.history(ids=[done])[0]["steps"] == []


def test_requeued_job_numbers_steps_from_zero(cluster: Cluster) -> None:
    c = cluster
    jid, gate = _gated(c, "requeue")
    assert c.client.start_step(jid, ["first-run"]) == 0
    assert c.client.requeue([jid])[0]["ok"]
    wait_for(lambda: (lambda j: j["restarts"] == 1 and j["state"] == "RUNNING")(c.job(jid)),
             30, what="the second run")
    assert c.job(jid)["steps"] == []
    assert c.client.start_step(jid, ["second-run"]) == 0
    steps = c.job(jid)["steps"]
    assert [(s["name"], s["restarts"]) for s in steps] == [("second-run", 1)]
    gate.write_text("go")
    c.wait_done(jid)
