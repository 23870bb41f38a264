"""``corral sim``: replay SWF workload traces through the scheduling core.

Commands: ``run`` (one policy), ``compare`` (several policies side by side, with plots),
``rlscheduler`` (reproduce the published SC'20 baselines), ``convert`` (select and clean a
trace, write SWF or SWF.gz) and ``info`` (what a trace holds). Heavy imports (numpy,
matplotlib, the engine) happen inside the commands so ``corral --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

    from corral.core.config import SchedulerConfig
    from corral.sim.cluster import SimCluster
    from corral.sim.engine import EngineOptions
    from corral.sim.result import SimResult
    from corral.sim.swf import SwfTrace
    from corral.sim.workload import Workload

sim_app = typer.Typer(
    name="sim",
    help="Replay workload traces (SWF) through Corral's scheduler and compare policies.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(sim_app, name="sim")


TraceArg = Annotated[Path, typer.Argument(help="SWF trace (.swf or .swf.gz)")]
JobsOpt = Annotated[str, typer.Option(
    "--jobs", "-j", help="which jobs: all, N (first N), A:B (0-based slice), id:A-B")]
SampleOpt = Annotated[str | None, typer.Option(
    help="COUNTxLENGTH sampled sequences (e.g. 10x1024), each on an empty machine")]
SeedOpt = Annotated[int, typer.Option(help="seed for --sample")]
ClusterOpt = Annotated[Path | None, typer.Option(
    "--cluster", help="corral.toml with the machine (default: the trace header)")]
QueueMapOpt = Annotated[str | None, typer.Option(
    "--queue-map", help="SWF queue numbers to partitions of --cluster, e.g. 0=debug,1=batch")]
MachineOpt = Annotated[str, typer.Option(
    "--machine", help="header machine: auto (cores; nodes with --whole-nodes), cores "
    "(MaxProcs one-core nodes), nodes (MaxNodes x ppn) or pool (one node)")]
WholeOpt = Annotated[bool, typer.Option(
    "--whole-nodes", help="jobs take ceil(procs/ppn) whole nodes (default: cores anywhere)")]
ExceedOpt = Annotated[str, typer.Option(
    help="job running past its estimate: kill (at the limit, as a real scheduler) or run")]
MissingOpt = Annotated[str, typer.Option(
    "--missing-estimate", help="no estimate in the trace: runtime (perfect), default, max")]
DefaultEstOpt = Annotated[str, typer.Option(
    "--default-estimate", help="time limit for --missing-estimate default (e.g. 1:00:00)")]
ProcsOpt = Annotated[str, typer.Option(help="processor field: max, requested, allocated")]
UnknownOpt = Annotated[str, typer.Option(
    "--unknown-runtime", help="jobs with run time -1: drop, or a run time in seconds")]
CycleOpt = Annotated[str, typer.Option(
    "--cycle", help="batch: one cycle per instant; event: one per event (RLScheduler)")]
JsonOpt = Annotated[Path | None, typer.Option("--json", help="write metrics as JSON")]
CsvOpt = Annotated[Path | None, typer.Option(
    "--csv", help="write per-job rows (run) or one row per policy (compare) as CSV")]
PlotOpt = Annotated[Path | None, typer.Option(
    "--plot", help="directory for plots (timeseries, wait CDF, Gantt)")]
FormatOpt = Annotated[str, typer.Option("--format", help="plot format: png or svg")]
WindowOpt = Annotated[str | None, typer.Option(
    "--gantt-window", help="Gantt window in hours since trace start, A:B (default: 48 h)")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")]
ProgressOpt = Annotated[bool | None, typer.Option(
    "--progress/--no-progress",
    help="progress bar on stderr (default: only when stderr is a terminal)")]
WidthOpt = Annotated[int | None, typer.Option(
    "--width", min=40, help="table width in columns (default: the table's full width, "
    "at least the terminal's)")]
# every scheduler setting of the core that means something in a replay (corral.sim.settings)
BfResOpt = Annotated[int | None, typer.Option(
    "--bf-resolution", help="backfill time resolution in seconds (Slurm bf_resolution; "
    "default 60 or the cluster's)")]
BfWindowOpt = Annotated[str | None, typer.Option(
    "--bf-window", help="how far ahead backfill plans, Slurm time (1440 = minutes, 1-0)")]
BfTestOpt = Annotated[int | None, typer.Option(
    "--bf-max-job-test", help="jobs backfill examines per cycle (Slurm bf_max_job_test)")]
BfContOpt = Annotated[bool | None, typer.Option(
    "--bf-continue/--no-bf-continue", help="backfill continues past a job it cannot place")]
MaxJobsOpt = Annotated[int | None, typer.Option(
    "--max-jobs-per-cycle", help="cap on jobs the main pass examines (0: no cap)")]
ResPolOpt = Annotated[str | None, typer.Option(
    "--reservation-policy", help="current_highest (re-ranked every cycle) or highest "
    "(a reserved job stays first until it starts)")]
FsAlgOpt = Annotated[str | None, typer.Option(
    "--fairshare-algorithm", help="fair_tree or classic")]
HalfLifeOpt = Annotated[str | None, typer.Option(
    "--decay-half-life", help="fair-share usage half-life, Slurm time (7-0)")]
WeightsOpt = Annotated[str | None, typer.Option(
    "--priority-weights", help="multifactor weights, e.g. age=1000,fairshare=0,job_size=1000")]
MaxAgeOpt = Annotated[str | None, typer.Option(
    "--priority-max-age", help="age at which the age factor is full, Slurm time (7-0)")]
FavorSmallOpt = Annotated[bool | None, typer.Option(
    "--favor-small/--no-favor-small", help="multifactor job size favours small jobs")]
DefaultTimeOpt = Annotated[str | None, typer.Option(
    "--default-time", help="time limit for a job that gives none, Slurm time")]
GuardOpt = Annotated[str | None, typer.Option(
    "--starvation-guard", help="a job waiting this long (Slurm time, e.g. 12:00:00) goes "
    "ahead of all that have not, in submit order; 'off' to disable")]


def _fail(msg: str) -> typer.Exit:
    from rich.console import Console

    Console(stderr=True).print(f"[red]error:[/red] {msg}", highlight=False, soft_wrap=True)
    return typer.Exit(2)


def _parent(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)


def _load(trace_path: Path, jobs: str, procs: str, unknown: str, missing: str,
          default_est: str) -> tuple[SwfTrace, Workload]:
    from corral.core.parse.timefmt import parse_time_s
    from corral.sim.swf import SwfError, read_swf
    from corral.sim.workload import (
        LoadOptions,
        MissingEstimate,
        ProcsField,
        build_workload,
        select,
    )

    try:
        trace = read_swf(trace_path)
    except SwfError as exc:
        raise _fail(str(exc)) from None
    if unknown != "drop" and not unknown.isdigit():
        raise _fail(f"--unknown-runtime {unknown!r}: use drop or seconds (e.g. 10)")
    try:
        est = parse_time_s(default_est)
    except ValueError as exc:
        raise _fail(f"--default-estimate {default_est!r}: {exc}") from None
    try:
        unknown_s = None if unknown == "drop" else int(unknown)
        opts = LoadOptions(
            procs=ProcsField(procs), unknown_runtime_s=unknown_s,
            missing_estimate=MissingEstimate(missing), default_estimate_s=est or 3600,
        )
        wl = select(build_workload(trace, opts), jobs)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    if len(wl) == 0:
        raise _fail(f"{trace_path}: no jobs selected")
    return trace, wl


def _cluster(cluster: Path | None, wl: Workload, whole: bool, machine: str,
             queue_map: str | None = None) -> SimCluster:
    from corral.sim.cluster import ClusterError, from_config, from_header

    if machine not in ("auto", "cores", "nodes", "pool"):
        raise _fail(f"--machine {machine!r}: use auto, cores, nodes or pool")
    if machine == "auto":
        machine = "nodes" if whole else "cores"
    try:
        if cluster is not None:
            cl = from_config(cluster)
        else:
            cl = from_header(wl.max_nodes, wl.max_procs, whole_nodes=whole, machine=machine)
        return cl.with_queue_map(queue_map) if queue_map else cl
    except (ClusterError, ValueError) as exc:
        raise _fail(str(exc)) from None


def _engine_options(exceed: str, cycle: str, record: bool) -> EngineOptions:
    from corral.sim.engine import EngineOptions
    from corral.sim.workload import ExceedPolicy

    try:
        return EngineOptions(exceed=ExceedPolicy(exceed), cycle_mode=cycle,
                             record_allocations=record)
    except ValueError as exc:
        raise _fail(str(exc)) from None


def _show_progress(quiet: bool, progress: bool | None) -> bool:
    """``--progress`` forces the bar, ``--quiet``/``--no-progress`` hide it; by default it
    shows only when stderr is a terminal (it never goes to stdout)."""
    import sys

    if quiet or progress is False:
        return False
    return bool(progress) or sys.stderr.isatty()


def _stdout(width: int | None) -> Console:
    """stdout console: ``--width`` if given, otherwise wide enough never to cut a table
    (a pipe gets the table's natural width; a terminal narrower than the table wraps)."""
    from rich.console import Console

    if width is not None:
        return Console(width=width, highlight=False, soft_wrap=False)
    return Console(width=4096, highlight=False, soft_wrap=False)


def _scheduler(base: SchedulerConfig | None, **given: Any) -> SchedulerConfig:
    from corral.core.config import SchedulerConfig
    from corral.sim.settings import SettingsError, override

    try:
        return override(base or SchedulerConfig(), **given)
    except SettingsError as exc:
        raise _fail(str(exc)) from None


def _header(title: str, summaries: list[dict[str, Any]], base: SchedulerConfig) -> str:
    """Title, the base scheduler settings (a policy's own words, e.g. ``guard12h`` or
    ``highest``, are in its label) and the engine's."""
    from corral.sim.settings import as_dict, describe

    s = summaries[0]["settings"]
    return (f"{title}\nscheduler: {describe(as_dict(base))}\n"
            f"engine: exceed={s['exceed']} cycle={s['cycle_mode']} placement={s['placement']}")


def _dropped(counts: dict[str, int]) -> str:
    return ", ".join(f"{n:,} {reason.replace('_', ' ')}" for reason, n in counts.items())


def _run_all(wl: Workload, cluster: SimCluster, policies: list[Any], base: EngineOptions,
             sample: str | None, seed: int, show: bool) -> list[list[SimResult]]:
    """Results per policy (one per sampled sequence, or one for the whole selection)."""
    import dataclasses

    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from corral.sim.engine import simulate
    from corral.sim.workload import parse_sample, sequences

    parts = [wl]
    if sample:
        try:
            count, length = parse_sample(sample)
            parts = sequences(wl, count, length, seed)
        except ValueError as exc:
            raise _fail(str(exc)) from None
    out: list[list[SimResult]] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), disable=not show, transient=False,
                  console=Console(stderr=True, force_terminal=show or None)) as bar:
        for p in policies:
            task = bar.add_task(p.label, total=sum(len(x) for x in parts))
            results = []
            offset = 0
            for part in parts:
                def tick(done: int, total: int, _o: int = offset, _t: Any = task) -> None:
                    bar.update(_t, completed=_o + done)
                opt = dataclasses.replace(base, config=p.config, label=p.label)
                results.append(simulate(part, cluster, opt, tick))
                offset += len(part)
            bar.update(task, completed=offset)
            out.append(results)
    return out


def _summaries(runs: list[list[SimResult]]) -> list[dict[str, Any]]:
    """One summary per policy; sampled sequences are averaged (mean of each number)."""
    from corral.sim.metrics import summarize

    out = []
    for results in runs:
        sums = [summarize(r) for r in results]
        out.append(sums[0] if len(sums) == 1 else _mean_summary(sums))
    return out


def _mean_summary(sums: list[dict[str, Any]]) -> dict[str, Any]:
    import math

    def avg(values: list[Any]) -> Any:
        if all(isinstance(v, dict) for v in values):
            return {k: avg([v[k] for v in values]) for k in values[0]}
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            vals = [float(v) for v in values if not math.isnan(float(v))]
            return sum(vals) / len(vals) if vals else math.nan
        return values[0]

    keep = ("jobs", "wait_s", "response_s", "bsld", "slowdown", "utilization", "makespan_s",
            "queue_length", "fairness", "stats")
    out: dict[str, Any] = {k: avg([s[k] for s in sums]) for k in keep}
    out["jobs"] = {k: sum(s["jobs"][k] for s in sums) for k in sums[0]["jobs"]}
    out["label"] = sums[0]["label"]
    out["sequences"] = len(sums)
    out["settings"] = sums[0]["settings"]
    out["per_sequence"] = [{k: s[k] for k in ("wait_s", "bsld", "utilization")} for s in sums]
    return out


def _plots(plot_dir: Path, runs: list[list[SimResult]], fmt: str, window: str | None) -> None:
    from corral.sim.plots import plot_gantt, plot_timeseries, plot_wait_cdf

    if fmt not in ("png", "svg"):
        raise _fail("--format must be png or svg")
    plot_dir.mkdir(parents=True, exist_ok=True)
    firsts = [r[0] for r in runs]
    plot_timeseries(firsts, plot_dir / f"timeseries.{fmt}")
    plot_wait_cdf(firsts, plot_dir / f"wait_cdf.{fmt}")
    win = None
    if window:
        try:
            a, b = (float(x) * 3600 for x in window.split(":"))
        except ValueError:
            raise _fail(f"--gantt-window {window!r}: use A:B in hours") from None
        win = (a, b)
    for k, res in enumerate(firsts):
        plot_gantt(res, plot_dir / f"gantt_{k + 1}.{fmt}", win)


@sim_app.command("run")
def run_cmd(
    trace: TraceArg,
    policy: Annotated[str, typer.Option(
        "--policy", "-p", help="e.g. fcfs+easy, sjf+strict, multifactor+easy+nofs")] =
        "fcfs+easy",
    jobs: JobsOpt = "all", sample: SampleOpt = None, seed: SeedOpt = 1,
    cluster: ClusterOpt = None, queue_map: QueueMapOpt = None, machine: MachineOpt = "auto",
    whole_nodes: WholeOpt = False, exceed: ExceedOpt = "kill",
    missing_estimate: MissingOpt = "runtime", default_estimate: DefaultEstOpt = "1:00:00",
    procs: ProcsOpt = "max", unknown_runtime: UnknownOpt = "drop", cycle: CycleOpt = "batch",
    json_out: JsonOpt = None, csv_out: CsvOpt = None, plot: PlotOpt = None,
    fmt: FormatOpt = "png", gantt_window: WindowOpt = None,
    swf_out: Annotated[Path | None, typer.Option(
        "--swf", help="write the simulated schedule as SWF")] = None,
    quiet: QuietOpt = False,
    bf_resolution: BfResOpt = None, bf_window: BfWindowOpt = None,
    bf_max_job_test: BfTestOpt = None, bf_continue: BfContOpt = None,
    max_jobs_per_cycle: MaxJobsOpt = None, reservation_policy: ResPolOpt = None,
    fairshare_algorithm: FsAlgOpt = None, decay_half_life: HalfLifeOpt = None,
    priority_weights: WeightsOpt = None, priority_max_age: MaxAgeOpt = None,
    favor_small: FavorSmallOpt = None, default_time: DefaultTimeOpt = None,
    starvation_guard: GuardOpt = None, width: WidthOpt = None, progress: ProgressOpt = None,
) -> None:
    """Replay TRACE with one policy and print its metrics."""

    from corral.sim.compare import PolicyError, parse_policy
    from corral.sim.export import schedule_trace
    from corral.sim.metrics import write_jobs_csv, write_json
    from corral.sim.report import comparison_table
    from corral.sim.swf import write_swf

    src, wl = _load(trace, jobs, procs, unknown_runtime, missing_estimate, default_estimate)
    source = src if swf_out else None  # the raw trace is only needed to write SWF back
    del src
    cl = _cluster(cluster, wl, whole_nodes, machine, queue_map)
    base_cfg = _scheduler(
        cl.scheduler, bf_resolution_s=bf_resolution, bf_window=bf_window,
        bf_max_job_test=bf_max_job_test, bf_continue=bf_continue,
        max_jobs_per_cycle=max_jobs_per_cycle, reservation_policy=reservation_policy,
        fairshare_algorithm=fairshare_algorithm, decay_half_life=decay_half_life,
        priority_weights=priority_weights, priority_max_age=priority_max_age,
        favor_small=favor_small, default_time=default_time,
        starvation_guard=starvation_guard)
    try:
        pol = parse_policy(policy, base_cfg)
    except PolicyError as exc:
        raise _fail(str(exc)) from None
    runs = _run_all(wl, cl, [pol], _engine_options(exceed, cycle, plot is not None),
                    sample, seed, _show_progress(quiet, progress))
    summaries = _summaries(runs)
    console = _stdout(width)
    what = f"{sample} sampled sequences" if sample else f"{len(wl):,} jobs"
    console.print(_header(f"{trace.name}: {what} on {cl.description}", summaries, base_cfg),
                  markup=False)
    console.print(comparison_table(summaries))
    if wl.dropped:
        console.print(f"dropped while reading: {_dropped(wl.dropped)}")
    try:
        if json_out:
            _parent(json_out)
            write_json(json_out, summaries[0])
        if csv_out:
            _parent(csv_out)
            write_jobs_csv(csv_out, runs[0][0])
        if swf_out:
            _parent(swf_out)
            write_swf(swf_out, schedule_trace(runs[0][0], source))
        if plot:
            _plots(plot, runs, fmt, gantt_window)
    except OSError as exc:
        raise _fail(f"cannot write {exc.filename}: {exc.strerror}") from None


@sim_app.command("compare")
def compare_cmd(
    trace: TraceArg,
    policies: Annotated[str, typer.Option(
        "--policies", "-p", help="comma-separated policies")] =
        "fcfs+strict,fcfs+easy,sjf+easy,f1+easy,fcfs+conservative,multifactor+easy",
    jobs: JobsOpt = "all", sample: SampleOpt = None, seed: SeedOpt = 1,
    cluster: ClusterOpt = None, queue_map: QueueMapOpt = None, machine: MachineOpt = "auto",
    whole_nodes: WholeOpt = False, exceed: ExceedOpt = "kill",
    missing_estimate: MissingOpt = "runtime", default_estimate: DefaultEstOpt = "1:00:00",
    procs: ProcsOpt = "max", unknown_runtime: UnknownOpt = "drop", cycle: CycleOpt = "batch",
    json_out: JsonOpt = None, csv_out: CsvOpt = None, plot: PlotOpt = None,
    fmt: FormatOpt = "png", gantt_window: WindowOpt = None, quiet: QuietOpt = False,
    bf_resolution: BfResOpt = None, bf_window: BfWindowOpt = None,
    bf_max_job_test: BfTestOpt = None, bf_continue: BfContOpt = None,
    max_jobs_per_cycle: MaxJobsOpt = None, reservation_policy: ResPolOpt = None,
    fairshare_algorithm: FsAlgOpt = None, decay_half_life: HalfLifeOpt = None,
    priority_weights: WeightsOpt = None, priority_max_age: MaxAgeOpt = None,
    favor_small: FavorSmallOpt = None, default_time: DefaultTimeOpt = None,
    starvation_guard: GuardOpt = None, width: WidthOpt = None, progress: ProgressOpt = None,
) -> None:
    """Replay TRACE under several policies and print them side by side."""

    from corral.sim.compare import PolicyError, parse_policy
    from corral.sim.metrics import write_json, write_summary_csv
    from corral.sim.report import comparison_table

    _, wl = _load(trace, jobs, procs, unknown_runtime, missing_estimate, default_estimate)
    cl = _cluster(cluster, wl, whole_nodes, machine, queue_map)
    base_cfg = _scheduler(
        cl.scheduler, bf_resolution_s=bf_resolution, bf_window=bf_window,
        bf_max_job_test=bf_max_job_test, bf_continue=bf_continue,
        max_jobs_per_cycle=max_jobs_per_cycle, reservation_policy=reservation_policy,
        fairshare_algorithm=fairshare_algorithm, decay_half_life=decay_half_life,
        priority_weights=priority_weights, priority_max_age=priority_max_age,
        favor_small=favor_small, default_time=default_time,
        starvation_guard=starvation_guard)
    try:
        pols = [parse_policy(p, base_cfg) for p in policies.split(",") if p.strip()]
    except PolicyError as exc:
        raise _fail(str(exc)) from None
    if not pols:
        raise _fail("no policies given")
    runs = _run_all(wl, cl, pols, _engine_options(exceed, cycle, plot is not None),
                    sample, seed, _show_progress(quiet, progress))
    summaries = _summaries(runs)
    what = f"{sample} sampled sequences" if sample else f"{len(wl):,} jobs"
    console = _stdout(width)
    console.print(_header(f"{trace.name}: {what} on {cl.description}", summaries, base_cfg),
                  markup=False)
    console.print(comparison_table(summaries))
    if wl.dropped:
        console.print(f"dropped while reading: {_dropped(wl.dropped)}")
    try:
        if json_out:
            _parent(json_out)
            write_json(json_out, summaries)
        if csv_out:
            _parent(csv_out)
            write_summary_csv(csv_out, summaries)
        if plot:
            _plots(plot, runs, fmt, gantt_window)
    except OSError as exc:
        raise _fail(f"cannot write {exc.filename}: {exc.strerror}") from None


@sim_app.command("rlscheduler")
def rlscheduler_cmd(
    traces: Annotated[Path, typer.Option(
        help="directory holding the paper's traces (lublin_256.swf, "
        "SDSC-SP2-1998-4.2-cln.swf.gz, HPC2N-2002-2.2-cln.swf.gz, lublin_256_new2)")] =
        Path("../shared/traces"),
    only: Annotated[str | None, typer.Option(
        "--only", help="comma-separated subset of Lublin-1,SDSC-SP2,HPC2N,Lublin-2")] = None,
    core: Annotated[bool, typer.Option(
        help="also run the general core (strict/HIGHEST and textbook EASY)")] = True,
    per_sequence: Annotated[bool, typer.Option(
        "--per-sequence", help="print every sequence's values under each cell")] = False,
    count: Annotated[int, typer.Option("--sequences", min=1, help="sequences per cell")] = 10,
    length: Annotated[int, typer.Option("--length", min=1, help="jobs per sequence")] = 1024,
    seed: Annotated[int, typer.Option(help="seed of the authors' RNG protocol")] = 1,
    json_out: JsonOpt = None, width: WidthOpt = None, progress: ProgressOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """The RLScheduler (SC'20) heuristic table: 4 traces x 2 modes x 5 heuristics, bounded
    slowdown and utilization, published / reproduced (compat) / general core."""
    from rich import box
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
    from rich.table import Table

    from corral.sim import baselines as bl
    from corral.sim.metrics import write_json
    from corral.sim.rlstable import TableSpec, load_traces, run_table

    names = tuple(n.strip() for n in only.split(",") if n.strip()) if only else tuple(bl.TRACES)
    spec = TableSpec(traces=names, count=count, length=length, seed=seed, core=core)
    try:
        wls = load_traces(traces, names)
    except (OSError, ValueError) as exc:
        raise _fail(str(exc)) from None
    show = _show_progress(quiet, progress)
    total = 2 * len(names) * len(spec.heuristics)
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      disable=not show, console=Console(stderr=True,
                                                        force_terminal=show or None)) as bar:
            task = bar.add_task("cells", total=total)
            rows = run_table(wls, spec, lambda what: bar.update(task, advance=1,
                                                               description=what))
    except ValueError as exc:
        raise _fail(str(exc)) from None

    def num(v: float | None, digits: int) -> str:
        return "-" if v is None else f"{v:,.{digits}f}"

    table = Table(title=f"RLScheduler SC'20: {count} sequences of {length:,} jobs (seed "
                  f"{seed}), mean bounded slowdown (tau 10 s) and utilization",
                  header_style="bold", box=box.SIMPLE_HEAD)
    for col in ("trace", "mode", "policy"):
        table.add_column(col, no_wrap=True)
    for col in ("bsld\npublished", "bsld\ncompat", "bsld\ncore",
                "util\npublished", "util\ncompat", "util\ncore"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in rows:
        pub, comp, cor = r["published"] or {}, r["compat"], r["core"] or {}
        table.add_row(r["trace"], r["mode"], r["policy"],
                      num(pub.get("bsld"), 2), num(comp["bsld"], 2), num(cor.get("bsld"), 2),
                      num(pub.get("utilization"), 3), num(comp["utilization"], 3),
                      num(cor.get("utilization"), 3))
        if per_sequence:
            for k, start in enumerate(r["starts"]):
                cs = r["compat"]["per_sequence"]
                ks = (r["core"] or {}).get("per_sequence", {})
                table.add_row("", f"  sequence {k + 1}", f"start {start}", "",
                              num(cs["bsld"][k], 2),
                              num(ks["bsld"][k], 2) if ks else "-", "",
                              num(cs["utilization"][k], 3),
                              num(ks["utilization"][k], 3) if ks else "-", style="dim")
    console = _stdout(width)
    console.print(table)
    console.print("compat: the authors' loop (reproduces the published cells); core: the "
                  "general scheduler, without backfilling strict priority with persistent "
                  "(HIGHEST) reservations, with backfilling textbook EASY; its WFP3/UNI use "
                  "the real wait (now - submit). See docs/sim/rlscheduler.md.", markup=False)
    if json_out:
        try:
            _parent(json_out)
            write_json(json_out, {"sequences": count, "length": length, "seed": seed,
                                  "cells": rows})
        except OSError as exc:
            raise _fail(f"cannot write {exc.filename}: {exc.strerror}") from None


@sim_app.command("convert")
def convert_cmd(
    src: Annotated[Path, typer.Argument(help="input SWF (.swf or .swf.gz)")],
    dst: Annotated[Path, typer.Argument(help="output SWF (.gz compresses)")],
    jobs: JobsOpt = "all",
) -> None:
    """Copy a trace (header kept), optionally a selection of its job lines, as SWF/SWF.gz."""
    import numpy as np

    from corral.sim.swf import SwfError, read_swf, write_swf
    from corral.sim.workload import LoadOptions, build_workload, select

    try:
        trace = read_swf(src)
        wl = select(build_workload(trace, LoadOptions(unknown_runtime_s=-1)), jobs)
    except (SwfError, ValueError) as exc:
        raise _fail(str(exc)) from None
    write_swf(dst, trace.select(np.sort(wl.row)))
    typer.echo(f"wrote {len(wl):,} jobs to {dst}")


@sim_app.command("info")
def info_cmd(trace: TraceArg) -> None:
    """Header machine, job counts and the quirks a simulator must handle."""
    from rich.table import Table

    from corral.sim.swf import SwfError, read_swf

    try:
        t = read_swf(trace)
    except SwfError as exc:
        raise _fail(str(exc)) from None
    run, req = t.column("run_s"), t.column("time_req_s")
    procs = t.column("procs_alloc").clip(min=t.column("procs_req"))
    tab = Table(title=str(trace), show_header=False)
    rows = [
        ("jobs", f"{len(t):,}"),
        ("MaxNodes / MaxProcs", f"{t.max_nodes} / {t.header.max_procs}"),
        ("span (days)", f"{(t.column('submit_s').max() - t.column('submit_s').min()) / 86400:.1f}"
         if len(t) else "-"),
        ("run time -1 / 0", f"{int((run < 0).sum()):,} / {int((run == 0).sum()):,}"),
        ("no estimate (-1 or 0)", f"{int((req <= 0).sum()):,}"),
        ("run longer than estimate", f"{int(((req > 0) & (run > req)).sum()):,}"),
        ("largest job (procs)", f"{int(procs.max()) if len(t) else 0:,}"),
    ]
    for k, v in rows:
        tab.add_row(k, v)
    _stdout(None).print(tab)
