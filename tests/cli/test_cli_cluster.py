"""The CLI against a real `corral up --detach` cluster (controller + agent processes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from corral.cli.main import build_app

Cluster = Any  # the `cluster` fixture of conftest.py (state_dir, env, node, wait_job)

runner = CliRunner()
app = build_app()


def run(cluster: Cluster, *argv: str) -> Any:
    return runner.invoke(app, list(argv), env=cluster.env)


def submit(cluster: Cluster, *argv: str) -> str:
    res = run(cluster, "submit", "--parsable", *argv)
    assert res.exit_code == 0, res.output
    return res.stdout.strip()


def test_submit_script_runs_and_shows(cluster: Cluster, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH -J hello -c 2 --mem=100M\n#SBATCH -o out-%j.txt\n"
                      "echo \"hi from $SLURM_JOB_NAME\"\n")
    res = run(cluster, "submit", str(script))
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("Submitted job ")
    job_id = res.stdout.split()[-1]
    job = cluster.wait_job(job_id, lambda j: j["state"] == "COMPLETED")
    assert job["name"] == "hello" and job["cpus_per_task"] == 2
    out = tmp_path / f"out-{job_id}.txt"
    assert out.read_text() == "hi from hello\n"
    res = run(cluster, "show", job_id)
    assert res.exit_code == 0
    assert "COMPLETED" in res.stdout and str(out) in res.stdout and cluster.node in res.stdout
    assert str(script) in res.stdout  # Command: the script path
    res = run(cluster, "show", job_id, "--json")
    assert json.loads(res.stdout)["job"]["exit_code"] == 0
    res = run(cluster, "history", "--json", "-j", job_id)
    (rec,) = json.loads(res.stdout)["jobs"]
    assert rec["state"] == "COMPLETED" and rec["derived_exit"] == "0:0"
    res = run(cluster, "history", "-j", job_id)
    assert res.exit_code == 0 and "COMPLETED" in res.stdout


def test_script_arguments_reach_the_script(cluster: Cluster, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "args.sh"
    script.write_text("#!/bin/sh\n#SBATCH -o args.out\necho \"$#:$1:$2\"\n")
    job_id = submit(cluster, str(script), "a b", "c")
    cluster.wait_job(job_id, lambda j: j["state"] in ("COMPLETED", "FAILED"))
    assert (tmp_path / "args.out").read_text() == "2:a b:c\n"


def test_hold_release_update_cancel(cluster: Cluster, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    job_id = submit(cluster, "--hold", "-J", "held", "-t", "10", "--wrap", "sleep 60")
    res = run(cluster, "queue", "--json")
    (rec,) = [j for j in json.loads(res.stdout)["jobs"] if j["job_id"] == job_id]
    assert rec["state"] == "PENDING" and rec["reason"] == "JobHeldUser"
    res = run(cluster, "queue")
    assert "(JobHeldUser)" in res.stdout and "held" in res.stdout
    res = run(cluster, "show", job_id)
    assert "held by its owner" in res.stdout or "JobHeldUser" in res.stdout
    res = run(cluster, "update", job_id, "--time", "5", "--name", "renamed")
    assert res.exit_code == 0, res.output
    job = cluster.wait_job(job_id, lambda j: j["time_limit_s"] == 300)
    assert job["name"] == "renamed"
    res = run(cluster, "update", job_id, "--time", "+10")
    assert res.exit_code == 0, res.output
    cluster.wait_job(job_id, lambda j: j["time_limit_s"] == 900)
    res = run(cluster, "release", job_id)
    assert res.exit_code == 0, res.output
    cluster.wait_job(job_id, lambda j: j["state"] == "RUNNING")
    res = run(cluster, "queue", "--me", "--state", "R")
    assert job_id in res.stdout and cluster.node in res.stdout
    res = run(cluster, "cancel", job_id)
    assert res.exit_code == 0, res.output
    cluster.wait_job(job_id, lambda j: j["state"] == "CANCELLED")


def test_array_and_dependency(cluster: Cluster, tmp_path: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    res = run(cluster, "submit", "--array=0-2", "-o", "a-%A_%a.out", "--json", "--wrap",
              "echo task $SLURM_ARRAY_TASK_ID")
    assert res.exit_code == 0, res.output
    result = json.loads(res.stdout)
    assert len(result["job_ids"]) == 3
    array_id = str(result["array_job_id"])
    dep = submit(cluster, "-d", f"afterok:{array_id}", "--wrap", "true")
    cluster.wait_job(dep, lambda j: j["state"] == "COMPLETED")
    for i in range(3):
        assert (tmp_path / f"a-{array_id}_{i}.out").read_text() == f"task {i}\n"


def test_server_side_refusals_exit_1(cluster: Cluster) -> None:
    res = run(cluster, "submit", "-p", "nosuchpart", "--wrap", "true")
    assert res.exit_code == 1 and "nosuchpart" in res.stderr
    res = run(cluster, "submit", "--mem=100G", "--wrap", "true")
    assert res.exit_code == 1 and "memory" in res.stderr.lower()
    res = run(cluster, "show", "999999")
    assert res.exit_code == 1 and "999999" in res.stderr
    res = run(cluster, "cancel", "999999")
    assert res.exit_code == 1 and "999999" in res.stderr


def test_nodes_drain_resume(cluster: Cluster) -> None:
    res = run(cluster, "nodes", "--json")
    (node,) = json.loads(res.stdout)["nodes"]
    assert node["name"] == cluster.node and node["cpus"] == 4 and node["mem_mb"] == 4000
    res = run(cluster, "nodes")
    assert cluster.node in res.stdout and "/4" in res.stdout and "fast,ssd" in res.stdout
    res = run(cluster, "drain", cluster.node, "--reason", "disk check")
    assert res.exit_code == 0, res.output
    res = run(cluster, "nodes", "--json")
    node = json.loads(res.stdout)["nodes"][0]
    assert node["state"] in ("DRAINED", "DRAINING") and node["reason"] == "disk check"
    res = run(cluster, "resume", cluster.node)
    assert res.exit_code == 0, res.output
    res = run(cluster, "nodes", "--state", "IDLE,MIXED,ALLOCATED", "--json")
    assert [n["name"] for n in json.loads(res.stdout)["nodes"]] == [cluster.node]


def test_config_show_running(cluster: Cluster) -> None:
    res = run(cluster, "config", "show", "--json")
    assert res.exit_code == 0, res.output
    cfg = json.loads(res.stdout)["config"]
    assert cfg["cluster_name"] == "clitest"
    assert [p["name"] for p in cfg["partitions"]] == ["main", "other"]
