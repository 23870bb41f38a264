"""Filename patterns, --signal parsing, interpreter lines and the job environment."""

from __future__ import annotations

import signal

import pytest

from corral.agent.launch import JobExit, LaunchRequest
from corral.agent.prepare import (
    NO_VAL,
    expand_pattern,
    input_path,
    job_environment,
    output_paths,
    parse_warning_signal,
    script_command,
)


def req(**kw: object) -> LaunchRequest:
    base: dict[str, object] = dict(job_id=42, name="train", user="alice", uid=1000, gid=100,
                                   workdir="/home/alice/run")
    base.update(kw)
    return LaunchRequest(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("pattern,expected", [
    ("slurm-%j.out", "slurm-42.out"),
    ("%x_%u_%N_%n_%t.log", "train_alice_node7_0_0.log"),
    ("%5j-%%-%s-%J", "00042-%-batch-42.batch"),
    ("%A_%a", f"42_{NO_VAL}"),
    ("odd-%q-%", "odd-%q-%"),
    ("lit\\%j", "lit%j"),
])
def test_expand_pattern(pattern: str, expected: str) -> None:
    assert expand_pattern(pattern, req(), "node7") == expected


def test_array_defaults_and_paths() -> None:
    r = req(array_job_id=40, array_task_id=2, job_id=42)
    assert output_paths(r, "n") == ("/home/alice/run/slurm-40_2.out",) * 2
    assert expand_pattern("%A_%3a-%j", r, "n") == "40_002-42"
    assert output_paths(req(stdout="/abs/o-%j", stderr="e-%j"), "n") == \
        ("/abs/o-42", "/home/alice/run/e-42")
    assert input_path(req(), "n") == "/dev/null"
    assert input_path(req(stdin="in/%j.txt"), "n") == "/home/alice/run/in/42.txt"


def test_parse_warning_signal() -> None:
    w = parse_warning_signal("B:USR1@90")
    assert (w.signum, w.before_s, w.batch_only) == (signal.SIGUSR1, 90, True)
    w = parse_warning_signal("SIGTERM")
    assert (w.signum, w.before_s, w.batch_only) == (signal.SIGTERM, 60, False)
    assert parse_warning_signal("R:10@5").signum == 10
    for bad in ("X:USR1@5", "USR1@-3", "USR1@x", "NOPE", "99@1"):
        with pytest.raises(ValueError, match="--signal"):
            parse_warning_signal(bad)


def test_script_command() -> None:
    assert script_command("#!/bin/bash -l\necho\n", "/dev/fd/3") == ["/bin/bash", "-l", "/dev/fd/3"]
    assert script_command("#!/usr/bin/env python3\n", "S") == ["/usr/bin/env", "python3", "S"]
    assert script_command("echo no shebang\n", "S") == ["/bin/sh", "S"]
    assert script_command("#!\n", "S") == ["/bin/sh", "S"]


def test_job_environment() -> None:
    env = job_environment(req(env={"SLURM_JOB_NAME": "from-controller", "PATH": "/bin"},
                              cpus=(2, 3, 34, 35), gpus=(1, 3), nodes=("a1", "a2"),
                              node_index=1), "a2")
    assert env["SLURM_JOB_NAME"] == "from-controller"  # the controller's value wins
    assert env["PATH"] == "/bin"
    assert env["SLURM_JOB_ID"] == env["SLURM_JOBID"] == "42"
    assert env["SLURMD_NODENAME"] == "a2" and env["SLURM_NODEID"] == "1"
    assert env["SLURM_CPUS_ON_NODE"] == "4"
    assert env["SLURM_JOB_NODELIST"] == "a1,a2" and env["SLURM_NNODES"] == "2"
    assert env["CUDA_VISIBLE_DEVICES"] == "1,3" == env["GPU_DEVICE_ORDINAL"]
    assert env["SLURM_GPUS_ON_NODE"] == "2"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert "SLURM_ARRAY_JOB_ID" not in env
    no_gpu = job_environment(req(env={"CUDA_VISIBLE_DEVICES": "7"}), "a")
    assert no_gpu["CUDA_VISIBLE_DEVICES"] == "7"  # no GPUs allocated: the submit env stays


def test_wire_forms_round_trip() -> None:
    r = req(cpus=(1, 2), gpus=(0,), env={"A": "b"}, signal="B:USR1@10")
    assert LaunchRequest.from_json(r.to_json()) == r
    e = JobExit(job_id=1, state="FAILED", exit_code=3, signal=0)
    assert JobExit.from_json({**e.to_json(), "future_field": 1}) == e
    assert e.exit_code_text == "3:0"
