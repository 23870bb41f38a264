"""``qsub``: submit a PBS job script (or ``-- command``); prints ``<seq>.<server>``.

Parsing is ``corral.frontends.pbs_options.parse_qsub`` (``#PBS`` directives, ``-l select=``
/ ``nodes=`` / ``walltime`` / ``mem`` with PBS units, ``-J``/``-t`` arrays, ``-W depend=``,
``-V``/``-v``, ``-o``/``-e``/``-j``). The only stdout line is the job id (arrays:
``<seq>[].<server>``), which dask-jobqueue, Parsl and Nextflow all read back.
"""

from __future__ import annotations

from corral.frontends.errors import SubmitError
from corral.frontends.pbs_options import parse_qsub
from corral.shims.context import Client, Context
from corral.shims.pbs import PBS_VERSION, server_name
from corral.shims.sbatch import submit_context

PBSE_UNKQUE = 15020 & 0xFF
PBSE_EXCQRESC = 15039 & 0xFF


def run(ctx: Context, client: Client) -> None:
    from corral.client import CorralError

    sctx = submit_context(ctx, "qsub")
    try:
        req = parse_qsub(ctx.argv, sctx)
    except SubmitError as exc:
        raise ctx.fail(exc.message, exc.exit_code) from None
    if req.options.version:
        ctx.print(f"pbs_version = {PBS_VERSION}")
        return
    try:
        result = client.submit_result(req.submission.to_json())
    except CorralError as exc:
        slurm = getattr(exc, "slurm", None)
        if exc.code in ("unavailable", "unauthorized", "forbidden", "internal"):
            raise ctx.fail(f"qsub: {exc.message}", 1) from None
        if slurm == "Invalid partition name specified":
            raise ctx.fail("qsub: Unknown queue", PBSE_UNKQUE) from None
        if exc.code == "rejected":
            raise ctx.fail(f"qsub: Job violates queue and/or server resource limits "
                           f"({exc.message})", PBSE_EXCQRESC) from None
        raise ctx.fail(f"qsub: {exc.message}", 1) from None
    ids = [int(i) for i in result.get("job_ids") or []]
    server = server_name()
    if req.submission.array:
        ctx.print(f"{result.get('array_job_id') or ids[0]}[].{server}")
    else:
        ctx.print(f"{ids[0] if ids else result.get('display_id')}.{server}")
