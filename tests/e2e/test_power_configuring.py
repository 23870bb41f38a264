"""A job allocated on a powered-down cloud node is CONFIGURING while the node boots (squeue
``CF``, scontrol, ``corral queue``), RUNNING in sacct, and RUNNING with its start time
reset once the node's agent registered (Slurm's power-up semantics). The resume program
starts the node's real agent only when the test opens a gate file."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from tests.e2e.cluster import ENTRY, TEST_CONFIG, Cluster, corral, wait_for
from tests.e2e.test_reservations import Shims

RESUME = """#!/bin/sh
setsid sh -c 'while [ ! -e {out}/gate ]; do sleep 0.05; done
exec {python} -c "{entry}" agent --controller unix:{sock} --key-file {key} \\
    --state-dir {state}/cloud-$0 --config {config} --name $0' $1 \\
    > {out}/agent-$1.log 2>&1 < /dev/null &
echo $! > {out}/agent-$1.pid
"""


def test_job_on_a_booting_node_is_configuring_until_the_node_is_up() -> None:
    root = Path(tempfile.mkdtemp(prefix="corral-cf-"))
    out = root / "out"
    out.mkdir()
    os.chmod(out, 0o1777)
    c = Cluster(root)
    fill = {"out": out, "python": sys.executable, "entry": ENTRY,
            "sock": c.sock, "key": c.state_dir / "cluster.key", "state": c.state_dir,
            "config": c.config}
    resume = root / "resume"
    resume.write_text(RESUME.format(**fill))
    resume.chmod(0o755)
    c.config.write_text(TEST_CONFIG + f"""
[[nodes]]
name = "cloud1"
cloud = true
cpus = 2
mem_mb = 1000

[power]
resume_program = "{resume}"
resume_timeout_s = 60
""")
    c.up()
    try:
        sh = Shims(c)
        jid = c.submit(f"echo up > {out}/ran", nodelist=("cloud1",))
        job = wait_for(lambda: (lambda j: j if j.get("configuring") else None)(c.job(jid)),
                       20, what="the job allocated on the booting node")
        assert job["state"] == "RUNNING" and job["state_short"] == "CF"
        booked = float(job["start_time"])
        assert sh.ok(f"squeue -h -j {jid} -o '%t %T %N'").split() == \
            ["CF", "CONFIGURING", "cloud1"]
        assert sh.ok("squeue -h -t CF -o %i").split() == [str(jid)]
        assert "JobState=CONFIGURING" in sh.ok(f"scontrol show job {jid}")
        assert sh.ok(f"sacct -n -X -P -j {jid} -o state").split() == ["RUNNING"]
        q = corral("queue", env=dict(os.environ, CORRAL_SOCKET=str(c.sock)))
        assert q.returncode == 0 and " CF " in next(
            x for x in q.stdout.splitlines() if x.strip().startswith(str(jid))), q.stdout
        assert not (out / "ran").exists()
        (out / "gate").touch()  # the node boots: its agent registers
        done = c.wait_done(jid, timeout=60)
        assert done["state"] == "COMPLETED" and not done.get("configuring"), done
        assert float(done["start_time"]) > booked  # reset when the node came up
        assert (out / "ran").read_text() == "up\n"
    finally:
        try:
            pid_file = out / "agent-cloud1.pid"
            if pid_file.exists():
                os.kill(-int(pid_file.read_text()), 9)
        except (OSError, ValueError):
            pass
        c.down()
        shutil.rmtree(root, ignore_errors=True)
