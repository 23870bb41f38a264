"""``[power] boot_time_s`` on a real cluster: a job for powered-down cloud nodes waits with
an estimated start that includes the boot, only the one node it needs is resumed (by a
resume program that starts a real agent), and the job runs once that agent registers."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.e2e.cluster import ENTRY, TEST_CONFIG, Cluster, wait_for
from tests.e2e.test_power import SUSPEND, _text
from tests.e2e.test_reservations import Shims

# the node "boots" until the test opens the gate: then its real agent starts
RESUME = """#!/bin/sh
echo "resume $1" >> {out}/power.log
setsid sh -c 'while [ ! -e {out}/gate ]; do sleep 0.05; done; exec "$@"' gate \\
    {python} -c '{entry}' agent --controller unix:{sock} --key-file {key} \\
    --state-dir {state}/cloud-$1 --config {config} --name $1 \\
    > {out}/agent-$1.log 2>&1 < /dev/null &
echo $! > {out}/agent-$1.pid
"""

BOOT_S = 20


def test_boot_time_in_the_plan_and_only_the_needed_node_resumed() -> None:
    root = Path(tempfile.mkdtemp(prefix="corral-boot-"))
    out = root / "out"
    out.mkdir()
    os.chmod(out, 0o1777)
    c = Cluster(root)
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
name = "cloud[1-3]"
cloud = true
cpus = 2
mem_mb = 1000

[[partitions]]
name = "main"
nodes = "testnode"
default = true

[[partitions]]
name = "cloud"
nodes = "cloud[1-3]"

[power]
resume_program = "{progs['resume']}"
suspend_program = "{progs['suspend']}"
resume_timeout_s = 60
boot_time_s = {BOOT_S}
""")
    c.up()
    try:
        t0 = time.time()
        jid = c.submit(f"echo $SLURMD_NODENAME > {out}/where", partitions=("cloud",))
        job = wait_for(lambda: (lambda j: j if j.get("est_start") else None)(c.job(jid)), 20,
                       what="an estimated start")
        assert job["state"] == "PENDING", job  # nothing runs on a node that is booting
        assert job["est_start"] >= t0 + BOOT_S - 2, (job, t0)
        sh = Shims(c)
        wait_for(lambda: (out / "power.log").exists(), 10, what="the resume")
        states = sorted(sh.ok("sinfo -N -h -p cloud -o '%t'").split())
        assert states == ["idle#", "idle~", "idle~"], states  # one node boots, not all
        start = sh.ok(f"squeue --start -h -j {jid} -o '%T %S'").split()
        assert start[0] == "PENDING" and start[1] != "N/A", start
        (out / "gate").touch()  # the node comes up: its agent registers
        try:
            done = c.wait_done(jid, timeout=60)
        except AssertionError:
            raise AssertionError(f"{c.job(jid)}\n{c.logs()}\n{_text(out / 'power.log')}")\
                from None
        assert done["state"] == "COMPLETED", done
        where = (out / "where").read_text().strip()
        # one job, three powered-down nodes: the one it ran on was resumed, no other
        assert (out / "power.log").read_text().splitlines() == [f"resume {where}"]
        powers = {n["name"]: n["power"] for n in c.client.nodes()
                  if n["name"].startswith("cloud")}
        assert powers[where] == "" and sorted(v for k, v in powers.items() if k != where) \
            == ["POWERED_DOWN", "POWERED_DOWN"], powers
    finally:
        for pid_file in out.glob("agent-*.pid"):
            try:
                os.kill(int(pid_file.read_text()), 9)
            except (OSError, ValueError):
                pass
        c.down()
        shutil.rmtree(root, ignore_errors=True)
