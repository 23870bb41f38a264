"""Apptainer's exec environment for SIF steps (``corral.agent.aptenv``): the rules as
pure functions, then the wrapper run for real by busybox's shell in a chroot."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from corral.agent import aptenv

BUSYBOX = shutil.which("busybox") or "/bin/busybox"


def test_step_env_follows_apptainer_exec() -> None:
    env = aptenv.step_env({"PATH": "/host/bin", "LD_LIBRARY_PATH": "/host/lib",
                           "SLURM_PROCID": "3", "KEEP": "job", "APPTAINERENV_FOO": "f",
                           "APPTAINERENV_bad-name": "x"}, "/srv/img/app.sif", ("KEEP",))
    assert env["PATH"] == aptenv.DEFAULT_PATH and env["USER_PATH"] == "/host/bin"
    assert "LD_LIBRARY_PATH" not in env and env["SLURM_PROCID"] == "3"
    assert env["APPTAINER_CONTAINER"] == env["SINGULARITY_CONTAINER"] == "/srv/img/app.sif"
    assert env["APPTAINER_NAME"] == "app.sif" and env["APPTAINER_COMMAND"] == "exec"
    assert not [k for k in env if k.startswith("APPTAINERENV_")]
    assert env["FOO"] == "f" and env["CORRAL_APT_FORCE"].split() == ["FOO", "KEEP"]
    assert env["CORRAL_APT_V_KEEP"] == "job"
    forced_path = aptenv.step_env({"PATH": "/h", "APPTAINERENV_PATH": "/mine"}, "/x.sif")
    assert forced_path["PATH"] == "/mine"
    assert "CORRAL_APT_FORCE" not in aptenv.step_env({"KEEP": "1"}, "/x.sif", ("GONE",))


def test_step_argv() -> None:
    assert aptenv.step_argv(["a", "b"], runscript=False, have_env=False,
                            have_sh=True) == ["a", "b"]
    assert aptenv.step_argv(["a"], runscript=True, have_env=True, have_sh=False) == [
        aptenv.RUNSCRIPT, "a"]
    wrapped = aptenv.step_argv(["a"], runscript=False, have_env=True, have_sh=True)
    assert wrapped[:2] == ["/bin/sh", "-c"] and wrapped[3:] == ["sh", "a"]


def _tree(root: Path, env_scripts: dict[str, str]) -> None:
    (root / "bin").mkdir(parents=True)
    shutil.copy(BUSYBOX, root / "bin" / "busybox")
    for name in ("sh", "env", "echo"):
        (root / "bin" / name).symlink_to("busybox")
    if env_scripts:
        d = root / ".singularity.d" / "env"
        d.mkdir(parents=True)
        for name, text in env_scripts.items():
            (d / name).write_text(text)
        (root / ".singularity.d" / "runscript").write_text('#!/bin/sh\necho run "$@"\n')
        (root / ".singularity.d" / "runscript").chmod(0o755)


def _run_in(root: Path, argv: list[str], env: dict[str, str], runscript: bool = False
            ) -> str:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.dup2(w, 1)
            os.chroot(root)
            os.chdir("/")
            args, e = aptenv.in_tree(argv, env, runscript=runscript)
            os.execve(args[0], args, e)
        finally:
            os._exit(127)
    os.close(w)
    with os.fdopen(r) as fh:
        out = fh.read()
    os.waitpid(pid, 0)
    return out


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists(BUSYBOX),
                    reason="needs root (chroot) and busybox-static")
def test_the_images_scripts_are_sourced_and_forced_names_win(tmp_path: Path) -> None:
    _tree(tmp_path / "t", {
        "90-environment.sh": "export FROM_SIF=yes KEEP=image FOO=image\n"
                             "export PATH=/opt/x/bin:$PATH\n",
        "99-base.sh": 'LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}'
                      '/.singularity.d/libs"\nexport LD_LIBRARY_PATH\n'})
    env = aptenv.step_env({"PATH": "/host", "KEEP": "job", "APPTAINERENV_FOO": "forced",
                           "LD_LIBRARY_PATH": "/host/lib"}, "/a.sif", ("KEEP",))
    out = _run_in(tmp_path / "t", ["env"], env).splitlines()
    got = dict(line.split("=", 1) for line in out if "=" in line)
    assert got["FROM_SIF"] == "yes" and got["KEEP"] == "job" and got["FOO"] == "forced"
    assert got["PATH"] == "/opt/x/bin:" + aptenv.DEFAULT_PATH
    assert got["LD_LIBRARY_PATH"] == "/.singularity.d/libs"
    assert not [k for k in got if k.startswith("CORRAL_APT")], got
    assert _run_in(tmp_path / "t", ["a b", "c"], env, runscript=True) == "run a b c\n"


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists(BUSYBOX),
                    reason="needs root (chroot) and busybox-static")
def test_a_tree_without_scripts_gets_the_variables_only(tmp_path: Path) -> None:
    _tree(tmp_path / "t", {})
    env = aptenv.step_env({"APPTAINERENV_FOO": "f"}, "/a.sif")
    out = _run_in(tmp_path / "t", ["/bin/env"], env)
    assert "FOO=f" in out.splitlines() and "CORRAL_APT" not in out, out
