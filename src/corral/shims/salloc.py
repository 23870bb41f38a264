"""``salloc``: obtain an allocation, run a command (default ``$SHELL``) in it, release it.

Messages on stderr follow Slurm (``salloc: Granted job allocation N``, ``salloc:
Relinquishing job allocation N``); the command runs here with the allocation's
``SLURM_*`` variables, so ``srun`` inside it starts steps of that job. The exit status is
the command's; the allocation ends with it (COMPLETED or FAILED).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from corral.frontends.errors import SubmitError
from corral.frontends.slurm_options import build_submission
from corral.shims.context import Context
from corral.shims.srun import parse

VERSION = "slurm 22.05.8"


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def main(ctx: Context) -> int:
    from corral.shims.alloc import Allocation, AllocationError, merge_env
    from corral.shims.local import make_client

    try:
        sctx, opts, command = parse(ctx, "salloc")
    except SubmitError as exc:
        _err(exc.message)
        return exc.exit_code
    if opts.help or opts.usage:
        print("Usage: salloc [OPTIONS(0)...] [ : [OPTIONS(N)...]] [command(0) [args(0)...]]")
        return 0
    if opts.version:
        print(VERSION)
        return 0
    if not command:
        command = [ctx.env.get("SHELL") or "/bin/sh"]
    try:
        sub = build_submission(opts, sctx, script=None, argv=command,
                               default_name=os.path.basename(command[0]), interactive=True)
    except SubmitError as exc:
        _err(exc.message)
        return exc.exit_code
    alloc = Allocation(make_client(), sub, "salloc", _err)
    try:
        job_env = alloc.start(verbose=int(opts.verbose or 0) > 0, quiet=opts.quiet)
    except AllocationError as exc:
        _err(exc.message)
        return exc.rc
    if not opts.quiet:
        _err(f"salloc: Granted job allocation {alloc.job_id}")
    rc = 1
    try:
        env = merge_env(ctx.env, job_env, alloc.dir)
        env.pop("SLURM_STEP_ID", None)
        try:
            proc = subprocess.Popen(command, env=env, cwd=opts.chdir or ctx.cwd)
        except OSError as exc:
            _err(f"salloc: error: {command[0]}: {exc.strerror or exc}")
            rc = 127
        else:
            old = signal.signal(signal.SIGINT, signal.SIG_IGN)
            try:
                while True:
                    try:
                        rc = proc.wait(timeout=1.0)
                        break
                    except subprocess.TimeoutExpired:
                        if not alloc.alive():
                            _err(f"salloc: Job allocation {alloc.job_id} has been revoked.")
                            proc.terminate()
            finally:
                signal.signal(signal.SIGINT, old)
            rc = rc if rc >= 0 else 128 - rc
    finally:
        if not opts.quiet:
            _err(f"salloc: Relinquishing job allocation {alloc.job_id}")
        alloc.release(rc)
    return rc
