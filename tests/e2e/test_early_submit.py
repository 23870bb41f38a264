"""A job is never refused because its nodes have not registered yet (issue 15, item 3):
submitted to a controller whose agent has not connected, it waits (ReqNodeNotAvail) and
runs once the node is there; what can never run is still refused once nodes are known."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from corral.client import CorralError
from tests.e2e.cluster import TEST_CONFIG, Cluster, wait_for


@pytest.mark.parametrize("config", [
    TEST_CONFIG,  # a configured node (discover = true) that has not registered
    TEST_CONFIG.split("[[nodes]]")[0] + "[scheduler]\ndefault_mem_per_cpu_mb = 100\n",  # none
], ids=["configured", "no-nodes-section"])
def test_submit_before_the_agent_registers(config: str) -> None:
    root = Path(tempfile.mkdtemp(prefix="corral-early-"))
    c = Cluster(root, config)
    (c.state_dir / "log").mkdir(parents=True)
    try:
        c.start_controller()
        jid = c.submit("echo ran")  # accepted; the next cycle gives it its reason
        rec = wait_for(lambda: (r := c.job(jid))["reason"] != "None" and r, 30,
                       what="the pending reason")
        assert rec["state"] == "PENDING" and rec["reason"] == "ReqNodeNotAvail", rec
        c.start_agent()
        assert c.wait_done(jid)["state"] == "COMPLETED"
        with pytest.raises(CorralError) as err:  # the node is known now: the verdict is back
            c.submit("true", cpus_per_task=4096)
        assert err.value.status == 422
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)
