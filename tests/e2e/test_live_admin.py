"""Run-time administration on a real cluster through the installed shims: sacctmgr add /
modify / delete / show of accounts, users and QOS, scontrol update PartitionName=, taking
effect on the next cycle without a restart and kept across a controller restart."""

from __future__ import annotations

import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import TEST_CONFIG, Cluster, wait_for
from tests.e2e.test_reservations import Shims, _jid

CONFIG = TEST_CONFIG + """
[[accounts]]
name = "physics"

[[users]]
name = "root"
accounts = ["physics"]
"""


@pytest.fixture(scope="module")
def sh() -> Iterator[Shims]:
    root = Path(tempfile.mkdtemp(prefix="corral-live-"))
    c = Cluster(root, config=CONFIG)
    c.up()
    try:
        yield Shims(c)
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


def test_show_in_slurm_formats(sh: Shims) -> None:
    assert sh.ok("sacctmgr show account") == (
        "   Account                Descr                  Org \n"
        "---------- -------------------- -------------------- \n"
        "      root                 root                 root \n"
        "   physics              physics                 root \n")
    assert sh.ok("sacctmgr -P -n show user format=user,defaultaccount") == "root|root\n"
    assert sh.ok("sacctmgr -n -P show assoc format=account,user,share") == \
        "root||1\nphysics||1\nphysics|root|1\n"
    assert sh.ok("sacctmgr -n -p show qos format=name,priority,maxwall") == "normal|0||\n"


def test_accounts_and_users_change_at_run_time(sh: Shims) -> None:
    out = sh.ok("sacctmgr -i add account chem Fairshare=5 Description=Chemistry")
    assert out.startswith(" Adding Account(s)\n  chem\n"), out
    assert sh.ok("sacctmgr -n -P show account format=account") == "root\nphysics\nchem\n"
    out = sh.ok("sacctmgr -i add user root Account=chem")
    assert sh.ok("sacctmgr -n -P show assoc where user=root format=account,user") == \
        "physics|root\nchem|root\n"
    jid = _jid(sh.ok("sbatch -A chem -t 1 --wrap true"))
    assert sh.c.wait_done(jid)["state"] == "COMPLETED"
    # refused with the reason, nothing changed
    p = sh.run("sacctmgr -i add user bob Account=nosuch")
    assert p.returncode == 1 and "unknown account 'nosuch'" in p.stderr, p.stderr
    p = sh.run("sacctmgr -i add account chem")
    assert p.returncode == 1 and "Nothing new added" in p.stderr, p.stderr
    p = sh.run("sacctmgr -i modify account chem set Frobnicate=1")
    assert p.returncode == 1 and "Unknown option: frobnicate" in p.stderr
    sh.ok("sacctmgr -i delete user root account=chem")
    assert sh.ok("sacctmgr -n -P show assoc where user=root format=account") == "physics\n"
    sh.ok("sacctmgr -i delete account chem")
    p = sh.run("sbatch -A chem -t 1 --wrap true")
    assert p.returncode == 1, p.stdout


def test_qos_limits_take_effect_on_the_next_cycle(sh: Shims) -> None:
    sh.ok("sacctmgr -i add qos tiny MaxJobsPerUser=1 Priority=10")
    assert sh.ok("sacctmgr -n -P show qos tiny format=name,priority,maxjobspu") == \
        "tiny|10|1\n"
    gate = sh.c.work / "gate-live"
    first = _jid(sh.ok(f"sbatch -q tiny -t 5 --wrap 'while [ ! -e {gate} ]; do sleep 0.05; "
                       "done'"))
    second = _jid(sh.ok("sbatch -q tiny -t 5 --wrap true"))
    sh.c.wait_state(first, "RUNNING")
    reason = wait_for(lambda: sh.ok(f"squeue -h -j {second} -o %r").strip() or None, 10)
    assert reason == "QOSMaxJobsPerUserLimit"
    out = sh.ok("sacctmgr -i modify qos where name=tiny set MaxJobsPerUser=2")
    assert out == " Modified qos...\n  tiny\n"
    assert sh.c.wait_done(second)["state"] == "COMPLETED"  # no restart needed
    gate.write_text("go")
    assert sh.c.wait_done(first)["state"] == "COMPLETED"
    # kept across a controller restart
    pid = sh.c.controller_pid()
    assert pid is not None
    sh.c.kill9(pid)
    sh.c.start_controller()
    assert sh.ok("sacctmgr -n -P show qos format=name,maxjobspu") == "normal|\ntiny|2\n"
    sh.ok("sacctmgr -i delete qos tiny")
    assert sh.ok("sacctmgr -n -P show qos format=name") == "normal\n"


def test_partition_state_changes(sh: Shims) -> None:
    assert sh.ok("scontrol update PartitionName=main State=DOWN") == ""
    assert "down" in sh.ok("sinfo -h -o '%P %a'")
    jid = _jid(sh.ok("sbatch -t 1 --wrap true"))
    reason = wait_for(lambda: sh.ok(f"squeue -h -j {jid} -o %r").strip() or None, 10)
    assert reason == "PartitionDown"
    p = sh.run("scontrol update PartitionName=main State=SIDEWAYS")
    assert p.returncode == 1 and "Valid states are UP, DOWN, DRAIN and INACTIVE" in p.stderr
    sh.ok("scontrol update PartitionName=main State=UP")
    assert sh.c.wait_done(jid)["state"] == "COMPLETED"


def test_only_operators_change(sh: Shims, test_user: pwd.struct_passwd) -> None:
    p = sh.run("sacctmgr -i add account evil", user=test_user.pw_uid)
    assert p.returncode == 1 and "Access/permission denied" in p.stderr, p.stderr
    p = sh.run("scontrol update PartitionName=main State=DOWN", user=test_user.pw_uid)
    assert p.returncode == 1 and "Access/permission denied" in p.stderr, p.stderr
    assert "evil" not in sh.ok("sacctmgr -n -P show account format=account")


def test_config_reload(sh: Shims) -> None:
    import json

    from tests.e2e.cluster import corral

    original = sh.c.config.read_text()
    try:
        sh.c.config.write_text(original.replace("cpus = 16", "cpus = 12") + """
[[qos]]
name = "normal"

[[qos]]
name = "fromfile"
priority = 7

[[licenses]]
name = "matlab"
count = 3
""")
        p = sh.run("scontrol reconfigure")
        assert p.returncode == 0 and p.stdout == ""
        assert p.stderr == ("scontrol: warning: these settings take effect after a restart "
                            "of the controller: nodes\n"), p.stderr
        assert "fromfile|7" in sh.ok("sacctmgr -n -P show qos format=name,priority")
        assert "LicenseName=matlab" in sh.ok("scontrol show licenses")
        node = next(n for n in sh.c.client.nodes() if n["name"] == "testnode")
        assert node["cpus"] == 16  # nodes wait for a restart
        r = corral("config", "reload", "--json", env=sh.env)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["applied"] == []  # nothing new since the last reload
        # a bad file changes nothing and says why
        sh.c.config.write_text(original + "\n[weights]\nage = \"lots\"\n")
        p = sh.run("scontrol reconfigure")
        assert p.returncode == 1 and "weights.age" in p.stderr, p.stderr
        assert "fromfile" in sh.ok("sacctmgr -n -P show qos format=name")
    finally:
        sh.c.config.write_text(original)
        sh.run("scontrol reconfigure")
