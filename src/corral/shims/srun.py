"""``srun``: run a job step's tasks; outside a job, allocate first (like Slurm).

Inside an allocation (``SLURM_JOB_ID`` set) ``srun`` starts ``-n`` tasks here with the
step variables (``corral.shims.tasks``) and records the step (``corral.shims.steps``).
The task count defaults as in Slurm: ``-n``; else ``--ntasks-per-node`` x nodes; else
``-N``; else the job's ``SLURM_NTASKS``. Outside one, it submits an interactive
allocation sized by its options (``corral.shims.alloc``), waits for it to start, runs
the step in it and ends it with the step's exit status.

``--mpi=pmix|pmi2|openmpi`` starts the ranks through Open MPI's ``mpirun`` (which
provides the PMIx wire-up); ``--mpi=none`` (the default) starts plain processes, each
seeing its rank in ``SLURM_PROCID``. ``--task-prolog``/``--task-epilog`` run on each
node around each task (``corral.agent.stepd``). Accepted and ignored, as on a single node:
``--cpu-bind``, ``--exclusive``, ``--overlap``, ``-u``, ``-v`` (beyond messages).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from corral.frontends.context import SubmitContext
from corral.frontends.errors import SubmitError
from corral.frontends.slurm_options import (
    SlurmOptions,
    apply_options,
    build_submission,
    parse_slurm_args,
)
from corral.protocol.step import task_layout
from corral.shims.context import Client, Context
from corral.shims.tasks import StepRunner, StepSpec

if TYPE_CHECKING:
    from corral.shims.steplaunch import RemoteStep

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


class StepShapeError(ValueError):
    pass


def check_mpi_type(value: str) -> str:
    """The ``--mpi`` type in lower case; StepShapeError for one srun cannot honour."""
    from corral.shims.pmi import MpiTypeError
    from corral.shims.pmi import check_mpi_type as check

    try:
        return check(value)
    except MpiTypeError as exc:
        raise StepShapeError(exc.message) from None


def step_nodes(opts: SlurmOptions, env: dict[str, str], alloc_nodes: list[str]) -> list[str]:
    """The step's nodes: the allocation's, after ``-r``, ``-x``, ``-w`` and ``-N``."""
    nodes = list(alloc_nodes) or [env.get("SLURMD_NODENAME", "localhost")]
    rel = opts.extra.get("relative")
    if rel is not None and alloc_nodes:
        if not rel.isdigit() or int(rel) >= len(nodes):
            raise StepShapeError(f"srun: error: --relative={rel} is outside the allocation "
                                 f"of {len(nodes)} node(s)")
        nodes = nodes[int(rel):]
    if opts.exclude and alloc_nodes:
        nodes = [n for n in nodes if n not in set(opts.exclude)]
    if opts.nodelist:
        if alloc_nodes:
            bad = [n for n in opts.nodelist if n not in set(alloc_nodes)]
            if bad:
                raise StepShapeError(
                    f"srun: error: Unable to create step for job {env.get('SLURM_JOB_ID')}: "
                    f"Requested node configuration is not available (node(s) "
                    f"{','.join(bad)} not in the allocation {','.join(alloc_nodes)})")
        wanted = [n for n in nodes if n in set(opts.nodelist)]
        nodes = wanted or nodes
    if opts.nodes is not None:
        if alloc_nodes and opts.nodes[0] > len(nodes):
            raise StepShapeError(
                f"srun: error: Unable to create step for job {env.get('SLURM_JOB_ID')}: "
                f"Requested node configuration is not available ({opts.nodes[0]} nodes "
                f"asked, {len(nodes)} available)")
        nodes = nodes[: max(1, opts.nodes[0])]
    if not nodes:
        raise StepShapeError("srun: error: no nodes left for the step after --exclude")
    return nodes


def step_shape(opts: SlurmOptions, env: dict[str, str],
               alloc_nodes: list[str]) -> tuple[int, list[str], list[list[int]]]:
    """(ntasks, step nodes, task ids per node) for a step in an allocation."""
    nodes = step_nodes(opts, env, alloc_nodes)
    if opts.ntasks:
        ntasks = opts.ntasks
    elif opts.ntasks_per_node:
        ntasks = opts.ntasks_per_node * len(nodes)
    elif opts.nodes is not None or opts.nodelist or opts.extra.get("relative") is not None:
        ntasks = len(nodes)
    else:
        raw = env.get("SLURM_NTASKS") or env.get("SLURM_NPROCS") or "1"
        ntasks = int(raw) if raw.isdigit() and int(raw) > 0 else 1
        if ntasks < len(nodes):
            nodes = nodes[:ntasks]
    caps = [opts.ntasks_per_node] * len(nodes) if opts.ntasks_per_node else None
    if caps and sum(caps) < ntasks:
        caps = None  # Slurm lets -n win over --ntasks-per-node (with a warning)
    try:
        layout = task_layout(ntasks, len(nodes), opts.extra.get("distribution") or "block",
                             caps)
    except ValueError as exc:
        raise StepShapeError(f"srun: error: {exc}") from None
    nodes = nodes[: len(layout)]
    return ntasks, nodes, layout


GPU_BINDS = ("none", "per_task:N", "map_gpu:<list>", "mask_gpu:<list>")


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


def check_gpu_bind(value: str) -> None:
    """``--gpu-bind`` values srun honours (``corral.agent.stepd.gpus_of_task``); any other
    is refused by name rather than ignored."""
    kind = value.strip()
    for flag in ("verbose,", "quiet,"):  # "verbose,map_gpu:0,1": a flag, then the type
        kind = kind.removeprefix(flag)
    if kind in ("verbose", "quiet"):
        kind = ""
    if not kind or kind == "none" or kind.startswith("map_gpu:") or (
            kind.startswith("per_task:") and kind[9:].isascii() and kind[9:].isdigit()):
        return
    if kind.startswith("mask_gpu:"):
        masks = kind[9:].split(",")
        if masks and all(m.strip() and _is_hex(m.strip()) for m in masks):
            return
    raise StepShapeError(f"srun: error: --gpu-bind={value} is not supported "
                         f"(use {', '.join(GPU_BINDS)})")


def step_warnings(opts: SlurmOptions) -> list[str]:
    """What srun accepts for Slurm's sake but does not apply, said on stderr."""
    out = []
    for flag, given in (("exclusive", bool(opts.exclusive)), ("exact", "exact" in opts.extra)):
        if given:
            out.append(f"srun: warning: --{flag} is not enforced between steps: this step "
                       "shares the job's CPUs with its other running steps")
    dist = opts.extra.get("distribution") or ""
    levels = dist.split(",", 1)[0].split(":")[1:]
    if any(level not in ("block", "*", "") for level in levels):
        out.append(f"srun: warning: -m {dist}: only the distribution over nodes is applied; "
                   "tasks are bound to CPUs in core order")
    return out


def launch_mode(env: dict[str, str], nodes: list[str], opts: SlurmOptions) -> str:
    """"agents" when the step runs anywhere but here (or a pty is asked for), "local"
    when all its tasks run on this node: srun is then already inside the job's share of
    it and starts the tasks itself (``CORRAL_SRUN_LAUNCH`` forces either). A step with
    ``--task-prolog``/``--task-epilog``, or in a job of a cluster with a ``[scripts]``
    task_prolog/task_epilog (``CORRAL_TASK_SCRIPTS``), always goes through the agents."""
    if opts.extra.get("task_prolog") or opts.extra.get("task_epilog") or \
            env.get("CORRAL_TASK_SCRIPTS"):  # srun's or the cluster's task prolog/epilog:
        return "agents"  # the node's step process runs them around each task
    forced = env.get("CORRAL_SRUN_LAUNCH", "")
    if forced in ("agents", "local"):
        return forced
    here = env.get("SLURMD_NODENAME")
    if "pty" in opts.extra or opts.container.given:  # containers: the agent starts them
        return "agents"
    return "local" if here and nodes == [here] else "agents"


@dataclass
class StepPlan:
    """A step's shape inside an allocation, from srun's options and the job's variables."""

    job_id: str
    ntasks: int
    nodes: list[str]
    layout: list[list[int]]  # global task ids per node
    mpi: str
    cpus: int | None  # --cpus-per-task (or the job's), None: not given
    open_mode: str  # "append" or "truncate"
    warnings: list[str]


def plan_step(opts: SlurmOptions, env: dict[str, str], *, in_job: bool = True) -> StepPlan:
    """The step's nodes, tasks and options; ``StepShapeError`` (srun's message) when they
    cannot be honoured in this allocation."""
    from corral.core.parse.hostlist import expand

    alloc_nodes = expand(env["SLURM_JOB_NODELIST"]) if env.get("SLURM_JOB_NODELIST") else []
    ntasks, nodes, layout = step_shape(opts, env, alloc_nodes)
    mpi = check_mpi_type(opts.extra.get("mpi") or env.get("SLURM_MPI_TYPE") or "none")
    if opts.extra.get("cpu_bind"):
        from corral.agent.cpubind import CpuBindError, check

        try:
            check(opts.extra["cpu_bind"])
        except CpuBindError as exc:
            raise StepShapeError(f"srun: error: {exc}") from None
    mem_bind = mem_bind_of(opts, env)
    if mem_bind:
        from corral.agent.membind import MemBindError
        from corral.agent.membind import check as check_mem

        try:
            check_mem(mem_bind)
        except MemBindError as exc:
            raise StepShapeError(str(exc) if "\n" in str(exc)
                                 else f"srun: error: {exc}") from None
    check_gpu_bind(opts.extra.get("gpu_bind") or "")
    step_container(opts)
    cpus = opts.cpus_per_task or (int(env["SLURM_CPUS_PER_TASK"])
                                  if env.get("SLURM_CPUS_PER_TASK", "").isdigit() else None)
    open_mode = opts.open_mode or {"a": "append", "t": "truncate"}.get(
        env.get("SLURM_OPEN_MODE", ""), "append")
    return StepPlan(job_id=env.get("SLURM_JOB_ID", "0"), ntasks=ntasks, nodes=nodes,
                    layout=layout, mpi=mpi, cpus=cpus, open_mode=open_mode,
                    warnings=step_warnings(opts) if in_job else [])  # outside: the job's


def run_step(ctx: Context, client: Client | None, opts: SlurmOptions, command: list[str],
             env: dict[str, str], *, alive: object = None, in_job: bool = True) -> int:
    """Run one step of the job in ``env`` (the allocation's variables), between srun's
    ``--prolog`` and ``--epilog`` programs: each runs here, as the caller, with the step's
    command and arguments as its arguments; a prolog that fails aborts the step, an
    epilog that fails is reported (Slurm's srun)."""
    prolog = opts.extra.get("prolog") or ""
    if prolog and prolog.lower() != "none":
        rc = _local_program(prolog, command, env)
        if rc != 0:
            _err(f"srun: error: srun prolog failed rc = {rc}. Aborting step.")
            return 1
    rc = _run_step(ctx, client, opts, command, env, alive=alive, in_job=in_job)
    epilog = opts.extra.get("epilog") or ""
    if epilog and epilog.lower() != "none":
        status = _local_program(epilog, command, env)
        if status != 0:
            _err(f"srun: error: srun epilog failed status={status}")
    return rc


def _local_program(path: str, command: list[str], env: dict[str, str]) -> int:
    """Run srun's --prolog/--epilog; its exit status (127: it could not start)."""
    import subprocess

    try:
        return subprocess.run([path, *command], env=env, stdin=subprocess.DEVNULL,
                              check=False).returncode
    except OSError as exc:
        _err(f"srun: error: cannot run {path}: {exc.strerror or exc}")
        return 127


def _run_step(ctx: Context, client: Client | None, opts: SlurmOptions, command: list[str],
              env: dict[str, str], *, alive: object = None, in_job: bool = True) -> int:
    from corral.shims.steps import StepRecorder

    try:
        plan = plan_step(opts, env, in_job=in_job)
    except StepShapeError as exc:
        _err(str(exc))
        return 1
    for warning in plan.warnings:
        _err(warning)
    job_id, ntasks, nodes, mpi = plan.job_id, plan.ntasks, plan.nodes, plan.mpi
    per = [len(t) for t in plan.layout]
    cpus, open_mode = plan.cpus, plan.open_mode
    if launch_mode(env, nodes, opts) == "agents":
        if client is None:
            _err(f"srun: error: cannot reach the controller to start a step on "
                 f"{','.join(nodes)} (set CORRAL_URL or CORRAL_SOCKET)")
            return 1
        return _run_remote(ctx, client, opts, command, env, plan)
    recorder = StepRecorder(client, job_id, env.get("SLURM_RESTART_COUNT", "0"), env)
    # a step is named by -J/--job-name, else after its program (Slurm's step name)
    step_id = recorder.start(opts.job_name or os.path.basename(command[0]), command, ntasks,
                             nodes, ntasks * (cpus or 1))
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
        extra_env=extra_env, cpu_bind=opts.extra.get("cpu_bind") or "",
        mem_bind=mem_bind_of(opts, env),
    )
    if spec.label is False and "label" in opts.extra and run_tasks == 1 and mpi == "none":
        spec.label = True
    if int(opts.verbose or 0) > 0:
        _err(f"srun: jobid {job_id}: nodes(1):`{','.join(nodes)}', cpu counts: "
             f"{ntasks * (cpus or 1)}(x1)")
        _err(f"srun: launching StepId={job_id}.{step_id} on host {nodes[0]}, "
             f"{ntasks} tasks: [0-{ntasks - 1}]")
    import resource

    runner = StepRunner(spec, err=_err, alive=alive if callable(alive) else None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    rc = runner.run()
    usage = recorder.local_usage(nodes[0], before, resource.getrusage(resource.RUSAGE_CHILDREN))
    recorder.end(rc if rc < 128 else 0, rc - 128 if rc >= 128 else 0, usage=usage)
    return rc


def remote_step(ctx: Context, client: Any, opts: SlurmOptions, command: list[str],
                env: dict[str, str], plan: StepPlan, err: Callable[[str], None],
                on_listen: Callable[[str], dict[str, dict[str, str]]] | None = None,
                ) -> RemoteStep:
    """The step through the agents of its nodes, ready to post (``RemoteStep``)."""
    from corral.shims.steplaunch import RemoteStep

    return RemoteStep(
        client=client, job_id=plan.job_id,
        name=opts.job_name or (os.path.basename(command[0]) if command else "entrypoint"),
        argv=list(command),
        cwd=opts.chdir or ctx.cwd, env=env, nodes=plan.nodes, tasks=plan.layout, err=err,
        cpus_per_task=plan.cpus or 1, cpu_bind=opts.extra.get("cpu_bind") or "",
        distribution=opts.extra.get("distribution") or "block", output=opts.output,
        error=opts.error, input=opts.input, append=plan.open_mode == "append",
        kill_on_bad_exit="kill_on_bad_exit" in opts.extra, pty="pty" in opts.extra,
        label="label" in opts.extra, job_name=opts.job_name or env.get("SLURM_JOB_NAME", ""),
        on_listen=on_listen, gpus_per_task=opts.gpus_per_task[0] if opts.gpus_per_task else 0,
        gpu_bind=opts.extra.get("gpu_bind") or "", container=step_container(opts),
        mem_bind=mem_bind_of(opts, env),
        task_prolog=task_program(opts, "task_prolog", ctx.cwd),
        task_epilog=task_program(opts, "task_epilog", ctx.cwd))


def mem_bind_of(opts: SlurmOptions, env: dict[str, str]) -> str:
    """``--mem-bind``, else the ``SLURM_MEM_BIND`` srun reads as its input ("": none)."""
    return str(opts.extra.get("mem_bind") or env.get("SLURM_MEM_BIND") or "")


def task_program(opts: SlurmOptions, key: str, cwd: str) -> str:
    """srun's ``--task-prolog``/``--task-epilog`` as an absolute path ("" for none): a
    relative one is taken from srun's working directory, as the nodes see it."""
    path = opts.extra.get(key) or ""
    if not path or path.lower() == "none":
        return ""
    return os.path.normpath(os.path.join(opts.chdir or cwd, path))


def step_container(opts: SlurmOptions) -> str:
    """The step's container spec text ("" for none) from srun's container options
    (their values were checked when parsed; ``StepShapeError`` when they do not fit
    together)."""
    from corral.frontends.container_options import build_spec
    from corral.frontends.context import SubmitContext

    try:
        spec = build_spec(opts.container, SubmitContext(prog="srun"))
    except SubmitError as exc:
        raise StepShapeError(str(exc)) from None
    return spec.to_text() if spec is not None else ""


def verbose_line(plan: StepPlan) -> str:
    return (f"srun: jobid {plan.job_id}: nodes({len(plan.nodes)}):`{','.join(plan.nodes)}', "
            f"tasks: {plan.ntasks}")


def _run_remote(ctx: Context, client: Client, opts: SlurmOptions, command: list[str],
                env: dict[str, str], plan: StepPlan) -> int:
    """The step through the agents of its nodes (``corral.shims.steplaunch``)."""
    pmi: Any = None
    on_listen = None
    ntasks, nodes, layout = plan.ntasks, plan.nodes, plan.layout
    if plan.mpi == "pmi2":
        from corral.shims.pmi import PmiServer

        def start_pmi(host: str) -> dict[str, dict[str, str]]:
            nonlocal pmi
            rank_nodes = [0] * ntasks
            for index, ids in enumerate(layout):
                for t in ids:
                    rank_nodes[t] = index
            server = PmiServer(ntasks, nodes, [len(t) for t in layout], rank_nodes,
                               advertise=host)
            server.start()
            pmi = server
            return {str(r): server.env_for(r) for r in range(ntasks)}

        on_listen = start_pmi
    step = remote_step(ctx, client, opts, command, env, plan, _err, on_listen)
    if int(opts.verbose or 0) > 0:
        _err(verbose_line(plan))
    try:
        rc = step.run()
    finally:
        if pmi is not None:
            pmi.close()
    if step.step_id is not None:
        try:
            request = getattr(client, "request")  # noqa: B009 - not in the Client protocol
            request("POST", f"/jobs/{plan.job_id}/steps/{step.step_id}/end",
                    step.end_body(rc))
        except Exception:  # noqa: BLE001 - the step's end is informational
            pass
    return rc


def image_command(opts: SlurmOptions) -> bool:
    """A step in a job may give no command when it runs its image's ENTRYPOINT and CMD
    (``--container-entrypoint``, as ``docker run IMAGE`` does)."""
    return bool(opts.container.entrypoint) and opts.container.given


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
    if (opts.extra.get("mpi") or "").lower() == "list":
        from corral.shims.pmi import MPI_LIST_TEXT

        sys.stdout.write(MPI_LIST_TEXT)
        return 0
    inside = bool(ctx.env.get("SLURM_JOB_ID")) and "jobid" not in opts.extra
    if not command and not (inside and image_command(opts)):
        _err("srun: fatal: No command given to execute.")
        return 1
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
        rc = run_step(ctx, client, opts, command, env, alive=alloc.alive, in_job=False)
    except BaseException:
        alloc.cancel()
        raise
    finally:
        alloc.release(rc)
    return rc
