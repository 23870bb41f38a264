"""Run a shim command in the caller's process, over the controller's REST client.

Used for ``srun``/``salloc`` (they supervise local processes), when the controller has no
shim endpoint, and by ``CORRAL_SHIM_LOCAL=1`` (debugging). ``run_local`` returns the exit
status; output goes straight to this process's stdout/stderr.
"""

from __future__ import annotations

import importlib
import os
import sys
import time

from corral.shims.context import Client, Context, NeedInput, ShimExit

COMMANDS = (
    "sbatch", "srun", "salloc", "squeue", "scancel", "sinfo", "sacct", "scontrol", "sacctmgr",
    "sshare", "sprio", "sreport", "sstat",
    "qsub", "qstat", "qdel",
)


def make_context(cmd: str, argv: list[str]) -> Context:
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = os.environ.get("PWD") or "/"
    return Context(prog=cmd, argv=list(argv), cwd=cwd, env=dict(os.environ), uid=os.getuid(),
                   now=time.time(), local=True)


def make_client() -> Client:
    from corral.client import Client as RestClient

    client: Client = RestClient()
    return client


def dispatch(cmd: str, ctx: Context, client: Client) -> int:
    """Run ``cmd`` on ``ctx``; returns the exit status (output stays in ``ctx``)."""
    from corral.client import CorralError

    if cmd not in COMMANDS:
        ctx.error(f"corral: unknown shim command {cmd!r}")
        return 2
    module = importlib.import_module(f"corral.shims.{cmd}")
    try:
        module.run(ctx, client)
    except ShimExit as exc:
        return exc.rc
    except CorralError as exc:
        ctx.error(f"{cmd}: error: {exc.message}")
        return 1
    return 0


def run_local(cmd: str, argv: list[str]) -> int:
    ctx = make_context(cmd, argv)
    if cmd in ("srun", "salloc"):
        module = importlib.import_module(f"corral.shims.{cmd}")
        rc: int = module.main(ctx)
        return rc
    try:
        rc = dispatch(cmd, ctx, make_client())
    except NeedInput as exc:  # cannot happen locally; be explicit if it does
        ctx.error(f"{cmd}: error: cannot read {exc}")
        rc = 1
    sys.stdout.write(ctx.stdout_text)
    sys.stdout.flush()
    sys.stderr.write(ctx.stderr_text)
    sys.stderr.flush()
    return rc


if __name__ == "__main__":
    sys.exit(run_local(sys.argv[1], sys.argv[2:]))
