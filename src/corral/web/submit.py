"""The web portal's submit form -> a ``JobSubmission``, parsed exactly as ``sbatch`` would.

The form sends JSON: ``script`` (a batch script; its ``#SBATCH`` lines count) and optional
fields that become ``sbatch`` flags given on the command line (so they override the
script's directives, as flags do): ``name``, ``partition``, ``cpus`` (per task), ``ntasks``,
``nodes``, ``mem`` (``4G``), ``time`` (``1:00:00``), ``gpus``, ``account``, ``qos``,
``array``, ``output``, ``workdir``. The working directory defaults to the caller's home
directory. The job gets a minimal login-like environment (``HOME``, ``USER``, ``LOGNAME``,
``SHELL``, ``PATH``) rather than the controller's own. Bad input raises ``SubmitError``
with ``sbatch``'s own wording.
"""

from __future__ import annotations

import posixpath
import pwd
import time
from collections.abc import Mapping
from typing import Any

from corral.frontends.context import SubmitContext
from corral.frontends.errors import SubmitError
from corral.submission import JobSubmission

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
FIELDS = {
    "name": "--job-name", "partition": "--partition", "cpus": "--cpus-per-task",
    "ntasks": "--ntasks", "nodes": "--nodes", "mem": "--mem", "time": "--time",
    "gpus": "--gpus", "account": "--account", "qos": "--qos", "array": "--array",
    "output": "--output", "error": "--error",
}
MAX_SCRIPT_BYTES = 1024 * 1024


def _home(user: str) -> tuple[str, str]:
    try:
        pw = pwd.getpwnam(user)
        return pw.pw_dir or "/", pw.pw_shell or "/bin/sh"
    except KeyError:
        return "/tmp", "/bin/sh"


def form_argv(form: Mapping[str, Any]) -> list[str]:
    """The ``sbatch`` flags of the form's fields (empty fields are left out)."""
    argv: list[str] = []
    for key, flag in FIELDS.items():
        value = form.get(key)
        if value is None or str(value).strip() == "":
            continue
        text = str(value).strip()
        if "\n" in text or "\0" in text:
            raise SubmitError(f"sbatch: error: invalid value for {flag}: {text!r}", 1)
        argv.append(f"{flag}={text}")
    return argv


def form_submission(form: Mapping[str, Any], user: str, uid: int, gid: int,
                    now: float | None = None) -> JobSubmission:
    """Parse the form for ``user`` (uid/gid from the caller's authenticated identity)."""
    from corral.frontends.slurm_options import parse_sbatch

    if not isinstance(form, Mapping):
        raise SubmitError("sbatch: error: the form is a JSON object", 1)
    script = form.get("script")
    if not isinstance(script, str):
        raise SubmitError("sbatch: error: Batch script is empty!", 1)
    if len(script.encode()) > MAX_SCRIPT_BYTES:
        raise SubmitError(f"sbatch: error: the batch script is larger than "
                          f"{MAX_SCRIPT_BYTES // 1024} KiB", 1)
    home, shell = _home(user)
    workdir = str(form.get("workdir") or "").strip() or home
    if not posixpath.isabs(workdir):
        raise SubmitError(f"sbatch: error: the working directory must be an absolute path, "
                          f"got {workdir!r}", 1)
    env = {"HOME": home, "USER": user, "LOGNAME": user, "SHELL": shell, "PATH": DEFAULT_PATH}
    ctx = SubmitContext(prog="sbatch", cwd=posixpath.normpath(workdir), env=env,
                        now=time.time() if now is None else now, user=user, uid=uid, gid=gid,
                        host="web", read_stdin=lambda: script)
    req = parse_sbatch(form_argv(form), ctx)
    sub = req.submission
    sub.extra["submitted_via"] = "web"
    return sub
