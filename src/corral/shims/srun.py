"""``srun``: run a job step's tasks; outside a job, allocate first (like Slurm).

Inside an allocation (``SLURM_JOB_ID`` set) ``srun`` starts ``-n`` tasks here with the
step variables (``corral.shims.tasks``) and records the step (``corral.shims.steps``).
The task count defaults as in Slurm: ``-n``; else ``--ntasks-per-node`` x nodes; else
``-N``; else the job's ``SLURM_NTASKS``. Outside one, it submits an interactive
allocation sized by its options (``corral.shims.alloc``), waits for it to start, runs
the step in it and ends it with the step's exit status.

``--mpi=pmix|pmi2|openmpi`` starts the ranks through Open MPI's ``mpirun`` (which
provides the PMIx wire-up); ``--mpi=none`` (the default) starts plain processes, each
seeing its rank in ``SLURM_PROCID``. Accepted and ignored, as on a single node:
``--cpu-bind``, ``--exclusive``, ``--overlap``, ``-u``, ``-v`` (beyond messages).
"""

from __future__ import annotations

import os
import shutil
import sys

from corral.frontends.context import SubmitContext
from corral.frontends.errors import SubmitError
from corral.frontends.slurm_options import (
    SlurmOptions,
    apply_options,
    build_submission,
    parse_slurm_args,
)
from corral.shims.context import Client, Context
from corral.shims.tasks import StepRunner, StepSpec, block_distribution

VERSION = "slurm 22.05.8"
USAGE = ("Usage: srun [OPTIONS(0)... [executable(0) [args(0)...]]] [ : [OPTIONS(N)...]] "
         "executable(N) [args(N)...]")
MPI_VIA_MPIRUN = ("pmix", "pmix_v2", "pmix_v3", "pmix_v4", "pmix_v5", "pmi2", "openmpi")


def _err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def parse(ctx: Context, prog: str) -> tuple[SubmitContext, SlurmOptions, list[str]]:
    from corral.shims.sbatch import submit_context

    sctx = submit_context(ctx, prog)
    cli, positional = parse_slurm_args(ctx.argv, sctx)
    opts = SlurmOptions()
    apply_options(opts, cli, sctx, "cli")
    return sctx, opts, positional


def step_shape(opts: SlurmOptions, env: dict[str, str],
               alloc_nodes: list[str]) -> tuple[int, list[str], list[int]]:
    """(ntasks, step nodes, tasks per node) for a step in an allocation."""
    nodes = list(alloc_nodes) or [env.get("SLURMD_NODENAME", "localhost")]
    if opts.nodelist:
        wanted = [n for n in nodes if n in set(opts.nodelist)]
        nodes = wanted or nodes
    if opts.nodes is not None:
        nodes = nodes[: max(1, opts.nodes[0])]
    if opts.ntasks:
        ntasks = opts.ntasks
    elif opts.ntasks_per_node:
        ntasks = opts.ntasks_per_node * len(nodes)
    elif opts.nodes is not None:
        ntasks = len(nodes)
    else:
        raw = env.get("SLURM_NTASKS") or env.get("SLURM_NPROCS") or "1"
        ntasks = int(raw) if raw.isdigit() and int(raw) > 0 else 1
    if opts.ntasks_per_node and opts.ntasks_per_node * len(nodes) >= ntasks:
        per: list[int] = []
        left = ntasks
        for _ in nodes:
            take = min(opts.ntasks_per_node, left)
            per.append(take)
            left -= take
        per = [p for p in per if p] or [ntasks]
    else:
        per = block_distribution(ntasks, len(nodes))
    return ntasks, nodes[: len(per)], per


def run_step(ctx: Context, client: Client | None, opts: SlurmOptions, command: list[str],
             env: dict[str, str], *, alive: object = None) -> int:
    """Run one step of the job in ``env`` (the allocation's variables)."""
    from corral.core.parse.hostlist import expand
    from corral.shims.steps import StepRecorder

    job_id = env.get("SLURM_JOB_ID", "0")
    alloc_nodes = expand(env["SLURM_JOB_NODELIST"]) if env.get("SLURM_JOB_NODELIST") else []
    ntasks, nodes, per = step_shape(opts, env, alloc_nodes)
    cpus = opts.cpus_per_task or (int(env["SLURM_CPUS_PER_TASK"])
                                  if env.get("SLURM_CPUS_PER_TASK", "").isdigit() else None)
    recorder = StepRecorder(client, job_id, env.get("SLURM_RESTART_COUNT", "0"), env)
    # a step is named by -J/--job-name, else after its program (Slurm's step name)
    step_id = recorder.start(opts.job_name or os.path.basename(command[0]), command, ntasks,
                             nodes, ntasks * (cpus or 1))
    open_mode = opts.open_mode or {"a": "append", "t": "truncate"}.get(
        env.get("SLURM_OPEN_MODE", ""), "append")
    mpi = (opts.extra.get("mpi") or env.get("SLURM_MPI_TYPE") or "none").lower()
    argv = list(command)
    run_tasks = ntasks
    extra_env: dict[str, str] = {}
    if mpi in MPI_VIA_MPIRUN and ntasks > 1:
        mpirun = shutil.which("mpirun", path=env.get("PATH"))
        if mpirun is None:
            _err(f"srun: error: --mpi={mpi} needs Open MPI's mpirun on PATH")
            recorder.end(1)
            return 1
        argv = [mpirun, "-np", str(ntasks), "--oversubscribe"]
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")
        if "label" in opts.extra:
            argv.append("--tag-output")
        argv += command
        run_tasks = 1
        per = [1]
        extra_env = {"OMPI_MCA_ras": "^slurm", "OMPI_MCA_plm": "^slurm"}
    spec = StepSpec(
        argv=argv, ntasks=run_tasks, env=env, job_id=job_id, step_id=step_id,
        nodes=nodes, tasks_per_node=per, cwd=opts.chdir or ctx.cwd,
        user=env.get("SLURM_JOB_USER", ""), job_name=opts.job_name or env.get(
            "SLURM_JOB_NAME", ""),
        label="label" in opts.extra and run_tasks > 1, output=opts.output,
        error=opts.error, input=opts.input, append=open_mode == "append",
        kill_on_bad_exit="kill_on_bad_exit" in opts.extra, cpus_per_task=cpus,
        extra_env=extra_env,
    )
    if spec.label is False and "label" in opts.extra and run_tasks == 1 and mpi == "none":
        spec.label = True
    if int(opts.verbose or 0) > 0:
        _err(f"srun: jobid {job_id}: nodes(1):`{','.join(nodes)}', cpu counts: "
             f"{ntasks * (cpus or 1)}(x1)")
        _err(f"srun: launching StepId={job_id}.{step_id} on host {nodes[0]}, "
             f"{ntasks} tasks: [0-{ntasks - 1}]")
    runner = StepRunner(spec, err=_err, alive=alive if callable(alive) else None)
    rc = runner.run()
    recorder.end(rc if rc < 128 else 0, rc - 128 if rc >= 128 else 0)
    return rc


def main(ctx: Context) -> int:
    """``srun``'s entry point (always in the caller's process)."""
    from corral.shims.local import make_client

    try:
        sctx, opts, command = parse(ctx, "srun")
    except SubmitError as exc:
        _err(exc.message)
        return exc.exit_code
    if opts.help or opts.usage:
        print(USAGE)
        return 0
    if opts.version:
        print(VERSION)
        return 0
    if not command:
        _err("srun: fatal: No command given to execute.")
        return 1
    inside = bool(ctx.env.get("SLURM_JOB_ID")) and "jobid" not in opts.extra
    if inside:
        try:
            client: Client | None = make_client()
        except Exception:  # noqa: BLE001 - steps still run without the controller
            client = None
        return run_step(ctx, client, opts, command, dict(ctx.env))
    return _allocate_and_run(ctx, sctx, opts, command, make_client())


def _allocate_and_run(ctx: Context, sctx: SubmitContext, opts: SlurmOptions,
                      command: list[str], client: Client) -> int:
    from corral.shims.alloc import Allocation, AllocationError, merge_env

    try:
        sub = build_submission(opts, sctx, script=None, argv=command,
                               default_name=os.path.basename(command[0]), interactive=True)
    except SubmitError as exc:
        _err(exc.message)
        return exc.exit_code
    quiet = opts.quiet
    alloc = Allocation(client, sub, "srun", _err)
    try:
        job_env = alloc.start(verbose=int(opts.verbose or 0) > 0, quiet=quiet)
    except AllocationError as exc:
        _err(exc.message)
        return exc.rc
    rc = 1
    try:
        env = merge_env(ctx.env, job_env, alloc.dir)
        rc = run_step(ctx, client, opts, command, env, alive=alloc.alive)
    except BaseException:
        alloc.cancel()
        raise
    finally:
        alloc.release(rc)
    return rc
