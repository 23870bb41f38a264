"""`corral shims install`: launchers, refusal to shadow a real Slurm, --force, uninstall."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from corral.shims.install import COMMANDS, InstallError, install, is_ours, uninstall

CORRAL = [sys.executable, "-c", "from corral.cli.main import main; main()"]


def test_install_writes_executable_launchers(tmp_path: Path) -> None:
    res = install(tmp_path / "bin", path_env="", compiled=False)
    assert sorted(res.written) == sorted(COMMANDS) and res.compiled == []
    for cmd in COMMANDS:
        p = tmp_path / "bin" / cmd
        assert os.access(p, os.X_OK) and is_ours(p)
        head = p.read_text().splitlines()[0]
        assert head == f"#!{sys.executable} -IS"  # one word after the interpreter (Linux)
    # idempotent: our own files are replaced silently, here by compiled ones where cc works
    res = install(tmp_path / "bin", path_env="")
    for cmd in res.compiled:
        p = tmp_path / "bin" / cmd
        assert os.access(p, os.X_OK) and is_ours(p) and p.read_bytes()[:4] == b"\x7fELF"


def test_refuses_a_foreign_command_in_dir_and_a_real_slurm_on_path(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "sbatch").write_text("#!/bin/sh\necho real slurm\n")
    (real / "sbatch").chmod(0o755)
    with pytest.raises(InstallError) as info:
        install(tmp_path / "bin", path_env=str(real))
    assert f"sbatch is already on PATH at {real / 'sbatch'}" in str(info.value)
    assert not (tmp_path / "bin" / "squeue").exists()  # nothing written
    with pytest.raises(InstallError) as info:
        install(real, path_env="")
    assert f"{real / 'sbatch'} exists and is not a Corral shim" in str(info.value)
    res = install(real, force=True, path_env="")
    assert "sbatch" in res.replaced and is_ours(real / "sbatch")


def test_uninstall_removes_only_ours(tmp_path: Path) -> None:
    d = tmp_path / "bin"
    install(d, path_env="")
    (d / "other").write_text("keep me")
    assert sorted(uninstall(d)) == sorted(COMMANDS)
    assert [p.name for p in d.iterdir()] == ["other"]


def test_cli_install_refusal_message_and_exit(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "qsub").write_text("#!/bin/sh\n")
    (real / "qsub").chmod(0o755)
    env = {**os.environ, "PATH": f"{real}:{os.environ.get('PATH', '')}"}
    p = subprocess.run([*CORRAL, "shims", "install", str(tmp_path / "bin")], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert "refusing to install" in p.stderr and "qsub is already on PATH" in p.stderr
    p = subprocess.run([*CORRAL, "shims", "install", str(tmp_path / "bin"), "--force"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "bin" / "qsub").exists()


def test_launcher_without_a_controller_fails_clearly(tmp_path: Path) -> None:
    install(tmp_path / "bin", path_env="")
    env = {"PATH": "/usr/bin:/bin", "CORRAL_SOCKET": str(tmp_path / "nope.sock"),
           "HOME": str(tmp_path)}
    p = subprocess.run([str(tmp_path / "bin" / "squeue")], env=env, capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 1
    assert p.stderr.startswith(f"squeue: error: cannot reach the Corral controller at "
                               f"{tmp_path / 'nope.sock'}")
