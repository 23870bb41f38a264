"""``sstat``: what the running steps of a job use now, in Slurm 22.05's format.

Data: the job record (its steps) and the agents' live samples (``client.job_usage``:
each heartbeat carries the job's CPU seconds so far and resident memory per node,
``corral.controller.liveusage``). Columns and widths are ``sacct``'s
(``corral.shims.sacct_fields``: ``MaxRSS``, ``MaxRSSNode``, ``AveCPU``, ``MinCPU*``,
``NTasks``...), the default list is Slurm's ``sstat`` one.

Which steps (as Slurm): ``-j 12`` the lowest-numbered running ``srun`` step, ``-a`` /
``--allsteps`` every running step (``.batch`` first), ``-j 12.batch`` / ``-j 12.3`` that
step; several ``-j`` words or comma lists. What is measured: the ``.batch`` row shows the
batch script's own processes on the batch host, as Slurm counts the batch step (no step
task's processes: ``corral.agent.stepusage.batch_sample``; the CPU of ended steps that
``srun`` ran as its own children, which their reaping left in the script's time, taken
off; an older agent's sample of every process of the job is shown as it is); a running
``srun`` step shows what its tasks use now on each of its
nodes (each agent's heartbeat samples the processes started with that step's
``SLURM_STEP_ID``, ``corral.agent.stepusage``): ``AveCPU`` its CPU time over its tasks,
``MaxRSS``/``MaxRSSNode`` its biggest task and that task's node, ``Pids`` its processes;
a step no heartbeat has sampled yet prints those columns empty; figures Corral does not
measure (virtual memory, pages, disk I/O, energy, CPU frequency) print as ``sacct`` does.

Errors: no ``-j``, a bad id, an unknown option or field: Slurm's message and exit 1. A job
that is not running, a step that is not, a job without a running ``srun`` step (no
``-a``): Slurm's message for it, the next job, and exit 0 as ``sstat`` does. ``-i``
prints ``JobID,Nodelist,Pids`` (the batch script's processes for ``.batch``).
"""

from __future__ import annotations

from typing import Any

from corral.frontends.getopt import Arg, GetoptError, Opt, OptionTable, getopt_long
from corral.shims import sacct_fields as sa
from corral.shims import slurmfmt as sf
from corral.shims.context import Context

R, N = Arg.REQUIRED, Arg.NONE
TABLE = OptionTable.of([
    Opt("allsteps", ("allsteps",), "a", N),
    Opt("helpformat", ("helpformat",), "e", N),
    Opt("help", ("help",), "h", N),
    Opt("pidformat", ("pidformat",), "i", N),
    Opt("jobs", ("jobs",), "j", R),
    Opt("noconvert", ("noconvert",), None, N),
    Opt("noheader", ("noheader",), "n", N),
    Opt("format", ("format", "fields"), "o", R),
    Opt("parsable", ("parsable",), "p", N),
    Opt("parsable2", ("parsable2",), "P", N),
    Opt("usage", ("usage",), None, N),
    Opt("verbose", ("verbose",), "v", N),
    Opt("version", ("version",), "V", N),
])
VERSION = "slurm 22.05.8"
USAGE = "Usage: sstat [options] -j job[.stepid]\n\tUse --help for help"
DEFAULT_FIELDS = (
    "JobID,MaxVMSize,MaxVMSizeNode,MaxVMSizeTask,AveVMSize,MaxRSS,MaxRSSNode,MaxRSSTask,"
    "AveRSS,MaxPages,MaxPagesNode,MaxPagesTask,AvePages,MinCPU,MinCPUNode,MinCPUTask,"
    "AveCPU,NTasks,AveCPUFreq,ReqCPUFreq,ConsumedEnergy,MaxDiskRead,MaxDiskReadNode,"
    "MaxDiskReadTask,AveDiskRead,MaxDiskWrite,MaxDiskWriteNode,MaxDiskWriteTask,"
    "AveDiskWrite,TRESUsageInAve,TRESUsageInMax,TRESUsageInMaxNode,TRESUsageInMaxTask,"
    "TRESUsageInMin,TRESUsageInMinNode,TRESUsageInMinTask,TRESUsageInTot,TRESUsageOutAve,"
    "TRESUsageOutMax,TRESUsageOutMaxNode,TRESUsageOutMaxTask,TRESUsageOutMin,"
    "TRESUsageOutMinNode,TRESUsageOutMinTask,TRESUsageOutTot")
PID_FIELDS = "JobID,Nodelist,Pids"
# sstat.c's own lengths where they differ from sacct's (the names are the same)
WIDTHS = {"avediskread": 12, "avediskwrite": 12, "reqcpufreq": 10, "nodelist": 20}


def _pids(row: sa.Row) -> str:
    nodes = ((row.step or {}).get("usage") or {}).get("nodes") or {}
    return ",".join(str(p) for n in sorted(nodes) for p in nodes[n].get("pids") or ())


def columns(spec: str) -> list[sa.Column]:
    """``--format`` as sstat takes it: sacct's fields with sstat's widths, ``Pids``."""
    cols: list[sa.Column] = []
    for raw in (x.strip() for x in spec.split(",")):
        if not raw:
            continue
        name, pct, width = raw.partition("%")
        low = name.lower()
        if low == "pids":
            given = int(width) if width.lstrip("-").isdigit() else 0
            cols.append(sa.Column("Pids", given or 20, _pids))
            continue
        if not pct and low in WIDTHS:
            raw = f"{name}%{WIDTHS[low]}"
        col = sa.parse_fields(raw)[0]
        cols.append(sa.Column("Nodelist", col.width, col.getter) if low == "nodelist"
                    else col)
    return cols
ACTIVE_STEP = ("RUNNING", "COMPLETING", "SUSPENDED")


def _split(values: list[str]) -> list[str]:
    out: list[str] = []
    for v in values:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out


def _batch(rec: dict[str, Any], usage: dict[str, Any]) -> dict[str, Any] | None:
    step = sf.batch_step(rec)
    if step is None:
        return None
    nodes = step.get("nodes") or []
    sample = (usage.get("nodes") or {}).get(str(nodes[0])) if nodes else None
    if sample is not None:
        host = str(nodes[0])
        own = sample.get("batch")  # the batch script's processes only (newer agents)
        if isinstance(own, dict):
            cpu = max(0.0, float(own["cpu_time_s"]) - _local_steps_cpu(rec, host))
            rss, pids = float(own["max_rss_mb"]), list(own.get("pids") or ())
        else:  # an agent that reports the whole job: every process of it there
            cpu, rss = float(sample["cpu_time_s"]), float(sample["max_rss_mb"])
            pids = list(sample.get("pids") or ())
        step["usage"] = {"nodes": {host: {"node": host, "cpu_time_s": cpu, "max_rss_mb": rss,
                                          "pids": pids}},
                         "cpu_time_s": cpu, "max_rss_mb": rss}
        step["cpu_time_s"], step["max_rss_mb"] = cpu, rss
    return step


def _local_steps_cpu(rec: dict[str, Any], host: str) -> float:
    """CPU seconds of this run's ended steps that ``srun`` ran as its own children on the
    batch host (recorded without a launch: no ``node_tasks``): their tasks' time is in
    the batch script's reaped time, not the batch step's (``corral.agent.stepusage``)."""
    total = 0.0
    for st in rec.get("steps") or ():
        if st.get("end_time") and not st.get("node_tasks") and \
                [str(n) for n in st.get("nodes") or ()] == [host]:
            total += float(st.get("cpu_time_s") or 0.0)
    return total


def _live_step_usage(sid: str, usage: dict[str, Any]) -> dict[str, Any] | None:
    """A running step's figures from its nodes' last samples (None: no node has one):
    CPU seconds summed over the nodes, the biggest task's resident memory."""
    per: dict[str, Any] = {}
    for host, sample in sorted((usage.get("nodes") or {}).items()):
        got = ((sample or {}).get("steps") or {}).get(sid)
        if isinstance(got, dict):
            per[str(host)] = {"node": str(host), "cpu_time_s": float(got["cpu_time_s"]),
                              "max_rss_mb": float(got["max_rss_mb"]),
                              "pids": list(got.get("pids") or ())}
    if not per:
        return None
    return {"nodes": per, "cpu_time_s": sum(e["cpu_time_s"] for e in per.values()),
            "max_rss_mb": max(e["max_rss_mb"] for e in per.values())}


def _running_steps(rec: dict[str, Any], usage: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for st in rec.get("steps") or ():
        if str(st.get("state") or "RUNNING") not in ACTIVE_STEP or st.get("end_time"):
            continue
        step = dict(st)
        step["id"] = str(st.get("step_id", st.get("id")))
        live = _live_step_usage(step["id"], usage)  # the agents' last heartbeats
        step["usage"] = live
        step["cpu_time_s"] = live["cpu_time_s"] if live is not None else None
        step["max_rss_mb"] = live["max_rss_mb"] if live is not None else None
        out.append(step)
    return out


def run(ctx: Context, client: Any) -> None:
    from corral.client import CorralError

    try:
        parsed, positional = getopt_long(ctx.argv, TABLE, "sstat", stop_at_positional=False)
    except GetoptError as exc:
        raise ctx.fail(f"{exc.message}\nTry \"sstat --help\" for more information") from None
    opts: dict[str, list[str]] = {}
    for p in parsed:
        opts.setdefault(p.opt.key, []).append(p.value or "")
    if "help" in opts or "usage" in opts:
        ctx.print(USAGE)
        return
    if "version" in opts:
        ctx.print(VERSION)
        return
    if "helpformat" in opts:
        from corral.shims.sacct import helpformat

        ctx.print(helpformat())
        return
    words = _split(opts.get("jobs", [])) + [w for w in positional if w]
    if not words:
        raise ctx.fail("sstat: error: You didn't give me any jobs to stat.\n" + USAGE)
    spec = ",".join(opts.get("format", [])) or (PID_FIELDS if "pidformat" in opts
                                                else DEFAULT_FIELDS)
    try:
        cols = columns(spec)
    except sa.FieldError as exc:
        raise ctx.fail(f"sstat: error: {exc}") from None
    rows: list[sa.Row] = []
    for word in words:
        job_word, dot, step_word = word.partition(".")
        if not job_word or not job_word.replace("_", "").isdigit() or (dot and not step_word):
            raise ctx.fail(f"sstat: error: Invalid job id specified: {word}")
        # Slurm goes on to the next job after each of these, and sstat still exits 0
        try:
            rec = client.job(job_word)
        except CorralError:
            ctx.error(f"sstat: error: couldn't get steps for job {job_word}")
            continue
        if sf.job_state(rec) not in ("RUNNING", "SUSPENDED", "COMPLETING"):
            ctx.error(f"sstat: error: couldn't get steps for job {job_word}")
            continue
        try:
            usage = client.job_usage(rec["id"])
        except CorralError:
            usage = {}
        batch = _batch(rec, usage)
        steps = _running_steps(rec, usage)
        if step_word:
            pool = ([batch] if batch is not None else []) + steps
            chosen = [s for s in pool if s["id"] == step_word]
            if not chosen:
                ctx.error(f"sstat: error: problem getting step_layout for {job_word}."
                          f"{step_word}: Job/step already completing or completed")
                continue
        elif "allsteps" in opts:
            chosen = ([batch] if batch is not None else []) + steps
        else:
            numbered = sorted((s for s in steps if s["id"].isdigit()),
                              key=lambda s: int(s["id"]))
            chosen = numbered[:1]
            if not chosen:
                ctx.error(f"sstat: error: no steps running for job {job_word}")
                continue
        for st in chosen:
            rows.append(sa.Row(rec, st, ctx.now, False, "corral", None,
                               "noconvert" in opts))
    mode = "parsable2" if "parsable2" in opts else "parsable" if "parsable" in opts \
        else "fixed"
    for line in sa.render(cols, rows, header="noheader" not in opts, mode=mode):
        ctx.print(line)
