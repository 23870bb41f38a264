"""``corral account``: accounts, users and associations changed on a real controller, seen
by ``corral account list --json`` and by the ``sacctmgr`` shim (the same store)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from corral.cli.main import app, build_app
from tests.shims.harness import ShimCluster, start_cluster, stop_cluster

EXTRA = """
[[accounts]]
name = "physics"
shares = 40
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ShimCluster]:
    build_app()
    c = start_cluster(tmp_path_factory.mktemp("account"), EXTRA)
    try:
        yield c
    finally:
        stop_cluster(c)


def corral(c: ShimCluster, *args: str, rc: int = 0) -> str:
    env = {"CORRAL_STATE_DIR": str(c.state_dir), "CORRAL_SOCKET": "", "CORRAL_URL": ""}
    res = CliRunner().invoke(app, ["account", *args], env=env)
    assert res.exit_code == rc, (res.output, res.exception)
    return res.output


def as_json(c: ShimCluster, *args: str) -> Any:
    return json.loads(corral(c, *args, "--json"))


def test_accounts_add_modify_list_delete(cluster: ShimCluster) -> None:
    assert "Account added: chem" in corral(cluster, "add", "chem", "--shares", "10",
                                           "--grp-jobs", "5", "--max-wall", "2:00:00")
    corral(cluster, "add", "organic", "--parent", "chem")
    got = {a["name"]: a for a in as_json(cluster, "list")["accounts"]}
    assert got["chem"]["shares"] == 10 and got["organic"]["parent"] == "chem"
    assert got["chem"]["limits"]["grp_jobs"] == 5
    assert got["chem"]["limits"]["max_wall_s"] == 7200
    corral(cluster, "modify", "chem", "--grp-jobs", "-1", "--shares", "20")
    chem = next(a for a in as_json(cluster, "list")["accounts"] if a["name"] == "chem")
    assert chem["shares"] == 20 and chem["limits"].get("grp_jobs") is None
    table = corral(cluster, "list")
    assert "ACCOUNT" in table and "organic" in table and "max_wall_s=02:00:00" in table
    # the sacctmgr shim sees the same store
    r = cluster.run("sacctmgr", "-nP", "show", "account", "format=account")
    assert {"chem", "organic", "physics"} <= set(r.stdout.split()), r.stderr
    # an account with a sub-account cannot go; its child can
    corral(cluster, "delete", "chem", rc=1)
    corral(cluster, "delete", "organic")
    corral(cluster, "delete", "chem")
    assert {a["name"] for a in as_json(cluster, "list")["accounts"]} == {"physics"}


def test_users_and_associations(cluster: ShimCluster) -> None:
    corral(cluster, "add", "bio")
    assert "User added: carol" in corral(cluster, "user", "add", "carol", "-A", "physics")
    assert "Associations added" in corral(cluster, "user", "add", "carol", "-A", "bio",
                                          "--default-account", "bio")
    carol = next(u for u in as_json(cluster, "user", "list")["users"]
                 if u["name"] == "carol")
    assert carol["accounts"] == ["physics", "bio"] and carol["default_account"] == "bio"
    assoc = as_json(cluster, "assoc")["associations"]
    assert {"account": "bio", "user": "carol", "shares": 1, "default": True} in assoc
    r = cluster.run("sacctmgr", "-nP", "show", "assoc", "format=account,user")
    assert "bio|carol" in r.stdout.split()
    corral(cluster, "user", "modify", "carol", "--shares", "3")
    # dropping the default account's association moves the default
    assert "Associations deleted" in corral(cluster, "user", "delete", "carol", "-A", "bio")
    carol = next(u for u in as_json(cluster, "user", "list")["users"]
                 if u["name"] == "carol")
    assert carol["accounts"] == ["physics"] and carol["default_account"] == "physics"
    assert carol["shares"] == 3
    assert "last association" in corral(cluster, "user", "delete", "carol", "-A",
                                        "physics")
    assert all(u["name"] != "carol" for u in as_json(cluster, "user", "list")["users"])
    corral(cluster, "delete", "bio")


@pytest.mark.parametrize("args,message", [
    (("add", "x", "--parent", "no-such-account"), "no-such-account"),
    (("modify", "physics"), "nothing to change"),
    (("add", "x", "--grp-mem", "lots"), "bad --grp-mem 'lots'"),
    (("add", "x", "--max-wall", "forever"), "bad --max-wall 'forever'"),
    (("add", "x", "--grp-jobs", "-5"), "must be -1 (no limit) or more"),
    (("user", "add", "dave"), "--account is required"),
    (("user", "add", "dave", "-A", "no-such-account"), "no-such-account"),
    (("user", "delete", "nobody-here", "-A", "physics"), "no such user: nobody-here"),
    (("delete", "no-such-account"), "no-such-account"),
])
def test_bad_input(cluster: ShimCluster, args: tuple[str, ...], message: str) -> None:
    out = corral(cluster, *args, rc=1)
    assert message in out


def test_qos_add_modify_show_delete_live(cluster: ShimCluster) -> None:
    assert "QOS added: tiny" in corral(cluster, "qos", "add", "tiny", "--priority", "10",
                                       "--max-jobs", "1", "--max-wall", "1:00:00",
                                       "--grp-mem", "4G", "--preempt-mode", "requeue")
    tiny = as_json(cluster, "qos", "show", "tiny")
    assert tiny["priority"] == 10 and tiny["preempt_mode"] == "REQUEUE"
    assert tiny["limits"]["max_jobs_per_user"] == 1 and tiny["limits"]["grp_mem_mb"] == 4096
    assert tiny["limits"]["max_wall_s"] == 3600
    # the sacctmgr shim reads the same store
    r = cluster.run("sacctmgr", "-nP", "show", "qos", "tiny",
                    "format=name,priority,maxjobspu,maxwall")
    assert r.stdout == "tiny|10|1|01:00:00\n", (r.stdout, r.stderr)
    # ... and the scheduler uses it at once
    gate = cluster.base / "gate-qos"
    sub = [("sbatch", "-q", "tiny", "-t", "5", "--parsable", "--wrap",
            f"while [ ! -e {gate} ]; do sleep 0.05; done"),
           ("sbatch", "-q", "tiny", "-t", "5", "--parsable", "--wrap", "true")]
    first, second = (cluster.run(*argv).stdout.strip().split(";")[0] for argv in sub)
    cluster.wait_job(first, lambda j: j["state"] == "RUNNING")
    cluster.wait_job(second, lambda j: j.get("reason") == "QOSMaxJobsPerUserLimit")
    assert "QOS modified: tiny" in corral(cluster, "qos", "modify", "tiny",
                                          "--max-jobs", "2", "--grp-mem", "-1")
    cluster.wait_job(second, lambda j: j["state"] == "COMPLETED")
    gate.write_text("go")
    cluster.wait_job(first, lambda j: j["state"] == "COMPLETED")
    tiny = next(q for q in as_json(cluster, "qos", "list")["qos"] if q["name"] == "tiny")
    assert tiny["limits"]["max_jobs_per_user"] == 2 and tiny["limits"].get("grp_mem_mb") \
        is None and tiny["limits"]["max_wall_s"] == 3600  # merged, not replaced
    table = corral(cluster, "qos", "list")
    assert "tiny" in table and "requeue" in table and "max_wall_s=01:00:00" in table
    assert "priority: 10" in corral(cluster, "qos", "show", "tiny")
    # a QOS another one preempts cannot go
    corral(cluster, "qos", "add", "big", "--preempt", "tiny")
    assert "preempt: unknown QOS 'tiny'" in corral(cluster, "qos", "delete", "tiny", rc=1)
    corral(cluster, "qos", "modify", "big", "--preempt", "")
    assert "QOS deleted: tiny" in corral(cluster, "qos", "delete", "tiny")
    corral(cluster, "qos", "delete", "big")
    assert {q["name"] for q in as_json(cluster, "qos", "list")["qos"]} == {"normal"}


@pytest.mark.parametrize(("args", "message"), [
    (("qos", "add", "x", "--preempt-mode", "sometimes"), "bad --preempt-mode 'sometimes'"),
    (("qos", "add", "x", "--preempt", "no-such-qos"), "no-such-qos"),
    (("qos", "add", "x", "--max-jobs", "-2"), "must be -1 (no limit) or more"),
    (("qos", "add", "x", "--max-mem-per-user", "lots"), "bad --max-mem-per-user 'lots'"),
    (("qos", "add", "x", "--grace-time", "soon"), "bad --grace-time 'soon'"),
    (("qos", "modify", "normal"), "nothing to change"),
    (("qos", "modify", "no-such-qos", "--priority", "1"), "no-such-qos"),
    (("qos", "delete", "no-such-qos"), "no-such-qos"),
    (("qos", "show", "no-such-qos"), "no such qos: no-such-qos"),
    (("qos", "add", "normal"), "already exists"),
])
def test_qos_bad_input(cluster: ShimCluster, args: tuple[str, ...], message: str) -> None:
    out = corral(cluster, *args, rc=1)
    assert message in out
