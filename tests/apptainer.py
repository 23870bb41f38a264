"""Apptainer for the tests: a real ``apptainer`` on PATH, else Debian sid's through the
wrapper ``scripts/apptainer-rootfs`` installs (or ``scripts/apptainer-sid`` itself; see
docs/containers.md), and SIF images built from the loopback registry's images."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SID_ROOT = os.environ.get("CORRAL_APPTAINER_ROOT", "/var/cache/corral/apptainer-sid")
# where scripts/apptainer-rootfs installs the wrapper (jobs' users can run it there; a
# checkout may sit in a directory they cannot reach)
WRAPPER = os.environ.get("CORRAL_APPTAINER_WRAPPER", "/usr/local/lib/corral/apptainer")


def find_apptainer() -> tuple[str, str]:
    """(program, "") or ("", why there is none)."""
    real = shutil.which("apptainer")
    if real:
        return real, ""
    if not os.access(os.path.join(SID_ROOT, "usr/bin/apptainer"), os.X_OK):
        return "", (f"no apptainer on PATH and no sid root at {SID_ROOT} "
                    "(scripts/apptainer-rootfs builds it: root and a Debian mirror)")
    if shutil.which("bwrap") is None:
        return "", "bwrap is missing (apt-get install bubblewrap)"
    if os.access(WRAPPER, os.X_OK):
        return WRAPPER, ""
    return str(ROOT / "scripts" / "apptainer-sid"), ""


def require_apptainer() -> str:
    program, why = find_apptainer()
    if not program:
        pytest.skip(why)
    return program


def build_sif(program: str, ref: str, dest: Path) -> Path:
    """``apptainer build dest ref`` from a plain-HTTP loopback registry; world-readable."""
    res = subprocess.run([program, "-q", "build", "--no-https", str(dest), ref],
                         capture_output=True, text=True, timeout=120, check=False,
                         cwd=dest.parent, env={**os.environ, "HOME": str(dest.parent)})
    assert res.returncode == 0, res.stderr
    os.chmod(dest, 0o644)
    return dest


def build_sif_from(program: str, base: Path, dest: Path, sections: str) -> Path:
    """A SIF made from the SIF ``base`` with a definition file's extra ``sections``
    (``%environment``, ``%runscript``, ...); world-readable."""
    spec = dest.with_suffix(".def")
    spec.write_text(f"Bootstrap: localimage\nFrom: {base}\n\n{sections}")
    res = subprocess.run([program, "-q", "build", str(dest), str(spec)],
                         capture_output=True, text=True, timeout=120, check=False,
                         cwd=dest.parent, env={**os.environ, "HOME": str(dest.parent)})
    assert res.returncode == 0, res.stderr
    os.chmod(dest, 0o644)
    return dest
