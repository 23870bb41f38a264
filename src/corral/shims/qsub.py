"""``qsub``: submit a PBS job script (or ``-- command``); prints ``<seq>.<server>``.

Parsing is ``corral.frontends.pbs_options.parse_qsub`` (``#PBS`` directives, ``-l select=``
/ ``nodes=`` / ``walltime`` / ``mem`` with PBS units, ``-J``/``-t`` arrays, ``-W depend=``,
``-V``/``-v``, ``-o``/``-e``/``-j``). The only stdout line is the job id (arrays:
``<seq>[].<server>``), which dask-jobqueue, Parsl and Nextflow all read back.
"""

from __future__ import annotations

from typing import Any

from corral.frontends.errors import SubmitError
from corral.frontends.pbs_options import parse_qsub
from corral.shims.context import Client, Context, ShimExit
from corral.shims.pbs import PBS_VERSION, server_name
from corral.shims.sbatch import submit_context

PBSE_UNKQUE = 15020 & 0xFF
PBSE_EXCQRESC = 15039 & 0xFF


def prepare(ctx: Context) -> Any:
    """Parse: the request to submit, or ``None`` when done already (``--version``). Pure
    (see ``corral.shims.sbatch.prepare``)."""
    sctx = submit_context(ctx, "qsub")
    try:
        req = parse_qsub(ctx.argv, sctx)
    except SubmitError as exc:
        raise ctx.fail(exc.message, exc.exit_code) from None
    if req.options.version:
        ctx.print(f"pbs_version = {PBS_VERSION}")
        return None
    return req


def needs_client(req: Any) -> bool:
    return False


def refused(ctx: Context, exc: Any) -> ShimExit:
    """The exit for a submission the controller refused (``exc``: a ``CorralError``)."""
    slurm = getattr(exc, "slurm", None)
    if exc.code in ("unavailable", "unauthorized", "forbidden", "internal"):
        return ctx.fail(f"qsub: {exc.message}", 1)
    if slurm == "Invalid partition name specified":
        return ctx.fail("qsub: Unknown queue", PBSE_UNKQUE)
    if exc.code == "rejected":
        return ctx.fail(f"qsub: Job violates queue and/or server resource limits "
                        f"({exc.message})", PBSE_EXCQRESC)
    return ctx.fail(f"qsub: {exc.message}", 1)


def report(ctx: Context, req: Any, result: dict[str, Any]) -> list[int]:
    ids = [int(i) for i in result.get("job_ids") or []]
    server = server_name()
    if req.submission.array:
        ctx.print(f"{result.get('array_job_id') or ids[0]}[].{server}")
    else:
        ctx.print(f"{ids[0] if ids else result.get('display_id')}.{server}")
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
    report(ctx, req, result)
