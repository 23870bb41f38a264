"""``sbatch``: submit a batch script (file, stdin, ``/dev/stdin`` or ``--wrap``).

Parsing is ``corral.frontends.slurm_options.parse_sbatch`` (flags, ``#SBATCH`` lines,
``SBATCH_*`` variables, Slurm's error texts and exit codes). This module reads the script
through the ``Context`` (so the launcher reads it as the caller, at submit time: clients
delete or move it as soon as sbatch returns), submits, and prints what clients parse:

- ``Submitted batch job <id>`` (submitit, Parsl, dask-jobqueue, Nextflow) and nothing else
  on stdout; ``--parsable`` prints ``<id>`` (snakemake, batchspawner); ``--quiet`` nothing;
- for an array the id is the array's (``SLURM_ARRAY_JOB_ID``), as Slurm;
- a refusal by the controller prints its reason and Slurm's ``Batch job submission
  failed: ...`` line, exit 1.
"""

from __future__ import annotations

import time
from typing import Any

from corral.frontends.context import SubmitContext
from corral.frontends.errors import SubmitError
from corral.frontends.slurm_options import parse_sbatch
from corral.shims.context import Client, Context, ShimExit

VERSION = "slurm 22.05.8"
USAGE = (
    "Usage: sbatch [-N nnodes] [-n ntasks]\n"
    "              [-c ncpus] [-r n] [-p partition] [--hold] [--parsable] [-t minutes]\n"
    "              [-D path] [--no-kill] [--overcommit]\n"
    "              [--input file] [--output file] [--error file]\n"
    "              [--time-min=minutes] [--licenses=names] [--clusters=cluster_names]\n"
    "              [--chdir=directory] [--oversubscribe] [-m dist] [-J jobname]\n"
    "              [--verbose] [--gid=group] [--uid=user]\n"
    "              [--contiguous] [--mincpus=n] [--mem=MB] [--tmp=MB] [-C list]\n"
    "              [--account=name] [--dependency=type:jobid[+time]] [--comment=name]\n"
    "              [--mail-type=type] [--mail-user=user] [--nice[=value]] [--wait]\n"
    "              [--requeue] [--no-requeue] [--ntasks-per-node=n] [--propagate]\n"
    "              [--nodefile=file] [--nodelist=hosts] [--exclude=hosts]\n"
    "              [--network=type] [--mem-per-cpu=MB] [--qos=qos] [--gres=list]\n"
    "              [--mem-bind=...] [--reservation=name] [--mcs-label=mcs]\n"
    "              [--cpu-freq=min[-max[:gov]]] [--power=flags] [--gres-flags=opts]\n"
    "              [--switches=max-switches{@max-time-to-wait}] [--reboot]\n"
    "              [--core-spec=cores] [--thread-spec=threads]\n"
    "              [--bb=burst_buffer_spec] [--bbf=burst_buffer_file]\n"
    "              [--array=index_values] [--profile=...] [--ignore-pbs] [--spread-job]\n"
    "              [--export[=names]] [--export-file=file|fd] [--delay-boot=mins]\n"
    "              [--cpus-per-gpu=n] [--gpus=n] [--gpu-bind=...] [--gpu-freq=...]\n"
    "              [--gpus-per-node=n] [--gpus-per-socket=n] [--gpus-per-task=n]\n"
    "              [--mem-per-gpu=MB] [--tres-per-task=list]\n"
    "              executable [args...]"
)


def submit_context(ctx: Context, prog: str) -> SubmitContext:
    import pwd

    try:
        pw = pwd.getpwuid(ctx.uid)
        user, gid = pw.pw_name, pw.pw_gid
    except KeyError:
        user, gid = str(ctx.uid), ctx.uid
    return SubmitContext(
        prog=prog, cwd=ctx.cwd, env=ctx.env, now=ctx.now, user=user, uid=ctx.uid, gid=gid,
        host=ctx.env.get("CORRAL_SUBMIT_HOST") or _hostname(),
        read_file=ctx.read_file, read_stdin=ctx.read_stdin, is_dir=ctx.is_dir,
    )


def _hostname() -> str:
    import socket

    return socket.gethostname().split(".")[0]


def rejection_lines(prog: str, exc: Exception, failed_prefix: str) -> str:
    """What sbatch/srun/salloc print when the controller refuses a submission."""
    message = str(getattr(exc, "message", exc))
    slurm = getattr(exc, "slurm", None)
    if slurm:
        if message.lower() == str(slurm).lower():
            return f"{prog}: error: {failed_prefix}: {slurm}"
        return f"{prog}: error: {message}\n{prog}: error: {failed_prefix}: {slurm}"
    return f"{prog}: error: {failed_prefix}: {message}"


def prepare(ctx: Context) -> Any:
    """Parse the command line and script: the request to submit, or ``None`` when the
    command is done already (``--help``, ``--version``). Pure: no controller call, so the
    controller can run it on its event loop (``corral.shims.inproc``)."""
    sctx = submit_context(ctx, "sbatch")
    try:
        req = parse_sbatch(ctx.argv, sctx)
    except SubmitError as exc:
        raise ctx.fail(exc.message, exc.exit_code) from None
    o = req.options
    if o.help or o.usage:
        ctx.print(USAGE)
        return None
    if o.version:
        ctx.print(VERSION)
        return None
    if o.test_only:
        raise ctx.fail("sbatch: error: --test-only is not supported by Corral; "
                       "`corral submit --dry-run` shows the parsed request", 1)
    return req


def needs_client(req: Any) -> bool:
    """Whether the command talks to the controller again after the submission."""
    return bool(req.options.wait)


def refused(ctx: Context, exc: Any) -> ShimExit:
    """The exit for a submission the controller refused (``exc``: a ``CorralError``)."""
    if exc.code in ("unavailable", "unauthorized", "forbidden", "internal"):
        return ctx.fail(f"sbatch: error: {exc.message}", 1)
    return ctx.fail(rejection_lines("sbatch", exc, "Batch job submission failed"), 1)


def report(ctx: Context, req: Any, result: dict[str, Any]) -> list[int]:
    """Print what sbatch prints for an accepted submission; the job ids."""
    ids = [int(i) for i in result.get("job_ids") or []]
    shown = str(result.get("array_job_id") or (ids[0] if ids else result.get("display_id")))
    o = req.options
    if o.parsable:
        ctx.print(shown)
    elif not o.quiet:
        ctx.print(f"Submitted batch job {shown}")
    return ids


def run(ctx: Context, client: Client) -> None:
    from corral.client import CorralError

    req = prepare(ctx)
    if req is None:
        return
    try:
        result = client.submit_result(req.submission.to_json())
    except CorralError as exc:
        raise refused(ctx, exc) from None
    ids = report(ctx, req, result)
    if req.options.wait:
        rc = wait_for(client, ids)
        if rc:
            raise ShimExit(rc)


def wait_for(client: Client, ids: list[int], poll_s: float = 0.5) -> int:
    """``sbatch --wait``: block until every job ends; the highest exit status wins."""
    worst = 0
    pending = list(ids)
    while pending:
        rows = client.jobs(ids=pending, include_finished=True)
        still = []
        for r in rows:
            state = str(r.get("state"))
            if state in ("PENDING", "RUNNING", "SUSPENDED", "COMPLETING"):
                still.append(int(r["id"]))
            elif state != "COMPLETED":
                worst = max(worst, int(r.get("exit_code") or 1))
        pending = still
        if pending:
            time.sleep(poll_s)
    return worst
