"""Power saving and a cloud node on a real cluster: the resume program starts a real agent
for the node a job needs, the suspend program stops it when the node has been idle, and a
node whose agent never comes is DOWN after the resume timeout with its job requeued."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from tests.e2e.cluster import ENTRY, TEST_CONFIG, Cluster, wait_for
from tests.e2e.test_reservations import Shims

RESUME = """#!/bin/sh
echo "resume $1" >> {out}/power.log
[ -e {out}/noboot ] && exit 0
setsid {python} -c '{entry}' agent --controller unix:{sock} --key-file {key} \\
    --state-dir {state}/cloud-$1 --config {config} --name $1 \\
    > {out}/agent-$1.log 2>&1 < /dev/null &
echo $! > {out}/agent-$1.pid
"""
SUSPEND = """#!/bin/sh
echo "suspend $1" >> {out}/power.log
kill $(cat {out}/agent-$1.pid)
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _text(p: Path) -> str:
    return p.read_text() if p.exists() else f"({p.name}: none)\n"


def _node(c: Cluster, name: str) -> dict[str, object]:
    return next(n for n in c.client.nodes() if n["name"] == name)


def test_cloud_node_is_resumed_for_a_job_and_suspended_when_idle() -> None:
    root = Path(tempfile.mkdtemp(prefix="corral-power-"))
    out = root / "out"
    out.mkdir()
    os.chmod(out, 0o1777)
    c = Cluster(root)  # the paths first, then the configuration that names them
    fill = {"out": out, "python": sys.executable, "entry": ENTRY, "sock": c.sock,
            "key": c.state_dir / "cluster.key", "state": c.state_dir, "config": c.config}
    progs = {}
    for name, text in (("resume", RESUME), ("suspend", SUSPEND)):
        p = root / name
        p.write_text(text.format(**fill))
        p.chmod(0o755)
        progs[name] = p
    c.config.write_text(TEST_CONFIG + f"""
[[nodes]]
name = "cloud1"
cloud = true
cpus = 2
mem_mb = 1000

[power]
resume_program = "{progs['resume']}"
suspend_program = "{progs['suspend']}"
suspend_time_s = 2
suspend_timeout_s = 3
resume_timeout_s = 25
suspend_exc_nodes = "testnode"
""")
    c.up()
    try:
        sh = Shims(c)
        assert _node(c, "cloud1")["power"] == "POWERED_DOWN"
        lines = sh.ok("sinfo -N -h -o '%N %t'").splitlines()
        assert "cloud1 idle~" in lines and "testnode idle" in lines, lines
        assert "State=IDLE+CLOUD+POWERED_DOWN" in sh.ok("scontrol show node cloud1")
        # a job for the cloud node: queued (never refused), the node resumed, run there
        jid = c.submit(f"echo $SLURMD_NODENAME > {out}/where", nodelist=("cloud1",))
        try:
            job = c.wait_done(jid, timeout=60)
        except AssertionError:
            raise AssertionError(f"{c.job(jid)}\n{c.logs()}\n{_text(out / 'power.log')}"
                                 f"{_text(out / 'agent-cloud1.log')}") from None
        assert job["state"] == "COMPLETED", (job, c.logs())
        assert (out / "where").read_text() == "cloud1\n"
        assert (out / "power.log").read_text().splitlines()[0] == "resume cloud1"
        pid = int((out / "agent-cloud1.pid").read_text())
        # idle for suspend_time_s: suspended, its agent stopped, powered down again
        wait_for(lambda: _node(c, "cloud1")["power"] == "POWERED_DOWN", 30,
                 what="cloud1 powered down again")
        assert "suspend cloud1" in (out / "power.log").read_text().splitlines()
        wait_for(lambda: not _alive(pid), 10, what="the cloud agent to stop")
        assert _node(c, "testnode")["power"] == ""  # excluded: never suspended
        # an agent that never comes: DOWN after the resume timeout, the job requeued
        (out / "noboot").touch()
        jid2 = c.submit("true", nodelist=("cloud1",))
        wait_for(lambda: _node(c, "cloud1")["power"] == "POWERING_UP", 20,
                 what="cloud1 powering up")
        assert "cloud1 alloc#" in sh.ok("sinfo -N -h -o '%N %t'").splitlines() or \
            "cloud1 mix#" in sh.ok("sinfo -N -h -o '%N %t'").splitlines()
        node = wait_for(lambda: (lambda n: n if n["state"] == "DOWN" else None)(
            _node(c, "cloud1")), 40, what="cloud1 DOWN")
        assert node["reason"] == "ResumeTimeout reached"
        job2 = wait_for(lambda: (lambda j: j if j["restarts"] >= 1 else None)(c.job(jid2)),
                        20, what="the requeue")
        assert job2["state"] == "PENDING"
        c.client.cancel([jid2])
    finally:
        try:
            pid_file = out / "agent-cloud1.pid"
            if pid_file.exists():
                os.kill(int(pid_file.read_text()), 9)
        except (OSError, ValueError):
            pass
        c.down()
        shutil.rmtree(root, ignore_errors=True)
