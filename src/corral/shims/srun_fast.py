"""``srun``'s fast path: the step planned and started in the controller, its I/O relayed by
the compiled launcher (``launcher_srun.c``), with no Python interpreter on the job's node.

Inside an allocation the compiled ``srun`` opens the TCP listener for the step's nodes,
draws the step's key and sends the usual shim request (``corral.shims.lean``) with
``step_io: {"addr": "host:port", "key": "<hex>"}``. Here, on the controller, srun's
options are read exactly as the Python ``srun`` reads them (``corral.shims.srun``:
``parse``, ``plan_step``, ``remote_step``), and the answer is one of three:

- a plain shim answer (``CRSH1``) when srun only prints and exits: ``--help``,
  ``--version``, ``--mpi=list``, a bad option, a step that cannot be created (the
  controller's reason, in srun's words);
- ``CRSR1 python``: nothing was done; the launcher hands over to the Python ``srun``,
  which does what needs srun's own process: an allocation first (outside a job),
  ``--pty``, ``--mpi=pmi2`` (the PMI server lives in srun) and the MPI types it starts
  through ``mpirun``, ``--jobid``, ``CORRAL_SRUN_LAUNCH=local`` (tasks as srun's own
  children), ``--prolog``/``--epilog`` (programs run as srun's caller). A step on srun's
  own node otherwise goes through that node's agent like any other;
- the step recorded and sent to every node's agent (``corral.controller.steps
  .start_step``, as ``POST /jobs/<id>/steps`` does) and its layout for the relay::

      CRSR1 step <job> <step> <ntasks> <label> <kill_on_bad_exit> <stdin> <nnodes> <len err>
      <node> <task ids, comma-separated>          (one line per node, in step order)
      <err bytes: warnings and -v lines, printed first>

  ``<stdin>``: ``-1`` srun's stdin goes nowhere, ``-2`` to every task, ``N`` to task N.

The relay then does what ``corral.shims.steplaunch.RemoteStep`` does (same frames, same
messages, same exit status) and reports the step's end (``POST .../steps/<n>/end``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from corral.frontends.errors import SubmitError
from corral.protocol import step as sp
from corral.shims.context import Context
from corral.shims.lean import encode_frame

MAGIC = "CRSR1"
PYTHON = f"{MAGIC} python\n".encode()
_IO_ADDR = re.compile(r"^[0-9]{1,3}(\.[0-9]{1,3}){3}:[0-9]{1,5}$")
_IO_KEY = re.compile(r"^[0-9a-f]{32}$")


@dataclass
class FastStep:
    """A step ready to start: the ``POST /jobs/<id>/steps`` body and what the relay needs."""

    job_id: str
    body: dict[str, Any]
    nodes: list[str]
    layout: list[list[int]]
    ntasks: int
    label: bool
    kill_on_bad_exit: bool
    stdin: int  # -1 none, -2 all tasks, else a task id
    err: str


def step_io(data: Any) -> tuple[str, str]:
    """``(addr, key)`` of a request's ``step_io``; ValueError when malformed."""
    if not isinstance(data, dict):
        raise ValueError("step_io must be an object {addr, key}")
    addr, key = data.get("addr"), data.get("key")
    if not isinstance(addr, str) or not _IO_ADDR.match(addr):
        raise ValueError("step_io.addr must be an IPv4 host:port")
    if not isinstance(key, str) or not _IO_KEY.match(key):
        raise ValueError("step_io.key must be 32 lower-case hex digits")
    return addr, key


def prepare(ctx: Context, addr: str, key: str) -> FastStep | bytes:
    """srun's options read for a step through the agents: the step, or the whole answer
    (a ``CRSH1`` frame, or ``PYTHON``). Pure: nothing is recorded here."""
    from corral.shims import srun

    try:
        _sctx, opts, command = srun.parse(ctx, "srun")
    except SubmitError as exc:
        return encode_frame(exc.exit_code, "", exc.message + "\n")
    if opts.help or opts.usage:
        return encode_frame(0, srun.USAGE + "\n", "")
    if opts.version:
        return encode_frame(0, srun.VERSION + "\n", "")
    if (opts.extra.get("mpi") or "").lower() == "list":
        from corral.shims.pmi import MPI_LIST_TEXT

        return encode_frame(0, MPI_LIST_TEXT, "")
    if not command and srun.image_command(opts):
        return PYTHON  # the image's ENTRYPOINT and CMD: srun's own checks decide
    if not command:
        return encode_frame(1, "", "srun: fatal: No command given to execute.\n")
    env = dict(ctx.env)
    if not env.get("SLURM_JOB_ID", "").isdigit() or "jobid" in opts.extra:
        return PYTHON
    if any((opts.extra.get(k) or "none").lower() != "none" for k in ("prolog", "epilog")):
        return PYTHON  # srun's --prolog/--epilog run in srun's own process, as its user
    try:
        plan = srun.plan_step(opts, env)
    except srun.StepShapeError as exc:
        return encode_frame(1, "", f"{exc}\n")
    # a step on srun's own node goes through its agent too (the Python srun would start
    # the tasks itself): the compiled step process starts them in the job's share there
    # as fast, with slurmstepd's messages; CORRAL_SRUN_LAUNCH=local keeps the old way
    if (env.get("CORRAL_SRUN_LAUNCH") == "local" or "pty" in opts.extra
            or plan.mpi != "none"):
        return PYTHON
    step = srun.remote_step(ctx, None, opts, command, env, plan, ctx.error)
    err = "".join(w + "\n" for w in plan.warnings)
    if int(opts.verbose or 0) > 0:
        err += srun.verbose_line(plan) + "\n"
    target = step.stdin_target()
    stdin = -1 if target is None else (-2 if target == sp.ALL_TASKS else target)
    body = step.request_body(addr, key)
    body["pid"] = None  # srun's pid is the launcher's, not this process's
    return FastStep(job_id=plan.job_id, body=body, nodes=plan.nodes, layout=plan.layout,
                    ntasks=plan.ntasks, label=step.label, kill_on_bad_exit=step.kill_on_bad_exit,
                    stdin=stdin, err=err)


def reply(step: FastStep, step_id: int) -> bytes:
    """The ``CRSR1 step`` answer for a started step."""
    err = step.err.encode("utf-8", "surrogateescape")
    head = (f"{MAGIC} step {step.job_id} {step_id} {step.ntasks} {int(step.label)} "
            f"{int(step.kill_on_bad_exit)} {step.stdin} {len(step.nodes)} {len(err)}\n")
    lines = "".join(f"{node} {','.join(map(str, ids))}\n"
                    for node, ids in zip(step.nodes, step.layout, strict=True))
    return head.encode() + lines.encode() + err


def refused(step: FastStep, message: str) -> bytes:
    """srun's words for a step the controller would not start."""
    return encode_frame(1, "", f"{step.err}srun: error: Unable to create step for job "
                               f"{step.job_id}: {message}\n")
