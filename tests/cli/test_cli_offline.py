"""CLI parsing, errors and rendering that need no cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.main import build_app
from corral.cli.output import make_table
from corral.cli.render import NODE_COLUMNS, QUEUE_COLUMNS, job_sections, reason_words

runner = CliRunner()
app = build_app()


@pytest.fixture
def no_cluster(tmp_path: Path) -> dict[str, str]:
    """Environment pointing at a state dir where no controller runs."""
    return {"CORRAL_STATE_DIR": str(tmp_path / "none"), "CORRAL_SOCKET": "",
            "CORRAL_URL": ""}


def test_submit_help_lists_sbatch_options() -> None:
    res = runner.invoke(app, ["submit", "--help"])
    assert res.exit_code == 0
    for flag in ("--job-name", "--gpus", "--array", "--dependency", "--wrap", "--json"):
        assert flag in res.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-t", "abc", "--wrap=x"], "corral submit: error: Invalid --time specification"),
        (["--mem=1X", "--wrap=x"], "corral submit: error: Invalid --mem specification"),
        (["--bogus", "--wrap=x"], "corral submit: error: unrecognized option '--bogus'"),
        (["--array=x-y", "--wrap=x"],
         "corral submit: error: Batch job submission failed: Invalid job array specification"),
        (["/no/such/script.sh"], "corral submit: error: Unable to open file /no/such/script.sh"),
    ],
)
def test_submit_bad_input_exits_1_before_connecting(argv: list[str], message: str,
                                                    no_cluster: dict[str, str]) -> None:
    res = runner.invoke(app, ["submit", *argv], env=no_cluster)
    assert res.exit_code == 1
    assert res.stderr.splitlines()[0] == message


def test_submit_test_only_json(tmp_path: Path, no_cluster: dict[str, str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.sh").write_text("#!/bin/bash\n#SBATCH -J fromscript -N 2\n#SBATCH "
                                     "--mem=2G\necho $1\n")
    res = runner.invoke(app, ["submit", "--test-only", "--json", "-p", "gpu", "job.sh", "arg1"],
                        env=no_cluster)
    assert res.exit_code == 0, res.stderr
    sub = json.loads(res.stdout)["would_submit"]
    assert sub["spec"]["name"] == "fromscript" and sub["spec"]["nodes_min"] == 2
    assert sub["spec"]["partitions"] == ["gpu"] and sub["spec"]["mem_per_node_mb"] == 2048
    assert sub["argv"] == ["arg1"] and sub["workdir"] == str(tmp_path)
    assert "json" not in sub["extra"]  # corral's own option does not leak into the job


@pytest.mark.parametrize(
    "argv",
    [["queue"], ["nodes"], ["show", "1"], ["history"], ["cancel", "1"], ["hold", "1"],
     ["submit", "--wrap=true"], ["config", "show"], ["drain", "n1", "--reason", "x"]],
)
def test_no_controller_exit_3_and_says_how_to_start(argv: list[str],
                                                    no_cluster: dict[str, str]) -> None:
    res = runner.invoke(app, argv, env=no_cluster)
    assert res.exit_code == 3, res.output
    assert "corral up" in res.stderr


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["show", "abc"], "invalid job id 'abc'"),
        (["cancel", "1", "x_2"], "invalid job id 'x_2'"),
        (["cancel", "1", "--signal", "NOPE"], "unknown signal 'NOPE'"),
        (["queue", "--state", "sleeping"], "unknown job state 'SLEEPING'"),
        (["history", "--since", "the day before"], "--since: cannot read time"),
        (["update", "1"], "nothing to change"),
        (["drain", "n[1-", "--reason", "x"], "bad node name or hostlist"),
    ],
)
def test_bad_arguments_exit_1(argv: list[str], fragment: str,
                              no_cluster: dict[str, str]) -> None:
    res = runner.invoke(app, argv, env=no_cluster)
    assert res.exit_code == 1, res.output
    assert fragment in res.stderr


PENDING = {
    "id": 7, "job_id": "7", "name": "train", "user": "alice", "uid": 1000,
    "partition": "gpu", "state": "PENDING", "state_short": "PD", "reason": "Resources",
    "reason_detail": "", "est_start": 1_900_000_000.0, "rank": 2, "hold": "NONE",
    "submit_time": 1_899_990_000.0, "time_limit_s": 7200, "time_used_s": 0,
    "num_nodes": 2, "num_cpus": 16, "num_tasks": 2, "cpus_per_task": 8,
    "mem_per_node_mb": 65536, "gpus": 4, "tres": "cpu=16,mem=128G,node=2,gres/gpu=4",
    "nodelist": "", "workdir": "/home/alice", "stdout": "/home/alice/slurm-7.out",
    "stderr": "/home/alice/slurm-7.out", "command": "/home/alice/train.sh",
    "priority": 12345.6, "priority_factors": {"age": 0.25, "fairshare": 0.5},
    "dependency": "afterok:5", "dialect": "slurm",
}
RUNNING = {
    **PENDING, "id": 8, "job_id": "8_3", "state": "RUNNING", "state_short": "R",
    "reason": "None", "nodelist": "gpu[01-02]", "time_used_s": 3725,
    "allocation": [{"node": "gpu01", "cores": [0, 1, 2, 3, 8], "cpus": 5, "mem_mb": 4096,
                    "gpus": [0, 1], "tasks": 1}],
    "array_job_id": 8, "array_task_id": 3, "array_task_str": "0-9%2",
}


def _render(table: object) -> str:
    from rich.console import Console

    console = Console(width=300, record=True)
    console.print(table)
    return console.export_text()


def test_queue_rendering() -> None:
    out = _render(make_table([PENDING, RUNNING], QUEUE_COLUMNS))
    lines = out.splitlines()
    assert "NODELIST(REASON)" in lines[0]
    assert "7" in lines[2] and "(Resources)" in lines[2] and "PD" in lines[2]
    assert "8_3" in lines[3] and "gpu[01-02]" in lines[3] and "1:02:05" in lines[3]


def test_show_sections() -> None:
    sec = dict(job_sections(PENDING))
    status = dict(sec["Status"])
    assert status["Reason"] == "Resources: waiting for enough free CPUs, memory or GPUs"
    assert status["Estimated start"].startswith("2030-") and status["Place in queue"] == "2"
    assert status["Dependency"] == "afterok:5"
    assert dict(sec["Priority"]) == {"Priority": "12346", "age": "0.25", "fairshare": "0.5"}
    assert dict(sec["Request"])["Memory"] == "64G per node"
    assert dict(sec["Files"])["Stdout"] == "/home/alice/slurm-7.out"
    run = dict(job_sections(RUNNING))
    assert dict(run["Allocation"])["gpu01"] == (
        "cores 0-3,8 (5), 5 CPUs, 4G, GPUs 0-1, 1 tasks")
    assert dict(run["Job"])["Array"] == "8 task 3 (of 0-9%2)"
    assert "Reason" not in dict(run["Status"])


def test_reason_words_prefers_the_controllers_detail() -> None:
    assert reason_words({"reason": "Priority", "reason_detail": "behind job 4"}) == \
        "behind job 4"
    assert reason_words({"reason": "JobHeldUser"}).startswith("held by its owner")
    assert reason_words({"reason": "SomethingNew"}) == "SomethingNew"


def test_node_rendering() -> None:
    node = {"name": "gpu01", "state": "MIXED", "partitions": ["gpu"], "cpus": 64,
            "alloc_cpus": 16, "mem_mb": 524288, "alloc_mem_mb": 131072, "gpus": 4,
            "alloc_gpus": 2, "gpu_types": {"a100": 4}, "features": ["ib"], "reason": ""}
    out = _render(make_table([node], NODE_COLUMNS))
    assert "16/64" in out and "128G/512G" in out and "2/4 (a100:4)" in out


def test_connection_lost_after_sending_is_reported_as_uncertain(tmp_path: Path) -> None:
    """A controller that reads the request and hangs up: the job may exist, say so."""
    import socket
    import threading

    path = str(tmp_path / "c.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    got = bytearray()

    def serve() -> None:
        conn, _ = srv.accept()
        conn.settimeout(5)
        while b"\r\n\r\n" not in got:
            chunk = conn.recv(65536)
            if not chunk:
                break
            got.extend(chunk)
        conn.close()  # the request arrived; no answer

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        res = runner.invoke(app, ["submit", "--wrap", "true"],
                            env={"CORRAL_SOCKET": path, "CORRAL_URL": ""})
    finally:
        t.join(5)
        srv.close()
    assert got.startswith(b"POST /api/v1/jobs ")
    assert res.exit_code == 5, res.output
    assert "may have applied the request" in res.stderr
    assert "corral queue --me" in res.stderr


def test_submit_reads_the_script_from_stdin(no_cluster: dict[str, str]) -> None:
    res = runner.invoke(app, ["submit", "--test-only", "--json"], env=no_cluster,
                        input="#!/bin/sh\n#SBATCH -J piped -t 1:00\necho hi\n")
    assert res.exit_code == 0, res.stderr
    sub = json.loads(res.stdout)["would_submit"]
    assert sub["spec"]["name"] == "piped" and sub["spec"]["time_limit_s"] == 60
    assert sub["script"] == "#!/bin/sh\n#SBATCH -J piped -t 1:00\necho hi\n"
    res = runner.invoke(app, ["submit"], env=no_cluster, input="")
    assert res.exit_code == 1 and "Batch script is empty!" in res.stderr
