"""``sacct`` fields: names, default widths and values (Slurm 22.05 ``src/sacct/sacct.c``).

A row is a job allocation, its ``batch`` step, or a numbered ``srun`` step. Values are
rendered from the controller's job record (and step records where the controller keeps
them). Widths: negative means left-justified (``JobID`` is ``-12``); fixed-width output
cuts long values and ends them with ``+`` (``CANCELLED+``).

Fidelity choice (docs/shims.md): ``State`` of a cancelled job prints ``CANCELLED``, not
Slurm's ``CANCELLED by <uid>``: the snakemake plugin compares states exactly and would
wait forever on the faithful form. ``CORRAL_SACCT_CANCELLED_BY=1`` in the caller's
environment restores Slurm's form.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corral.core.parse.memory import format_mem_mb
from corral.core.parse.timefmt import format_time_s
from corral.shims import slurmfmt as sf

Record = dict[str, Any]


@dataclass(slots=True)
class Row:
    rec: Record  # the job record
    step: Record | None  # None: the allocation line; else {"id": "batch"|"0"..., ...}
    now: float
    cancelled_by: bool = False
    cluster: str = "corral"
    units: int | None = None  # --units (1 K .. 5 P), None: Slurm's exact conversion
    noconvert: bool = False  # --noconvert

    @property
    def is_step(self) -> bool:
        return self.step is not None

    def get(self, key: str) -> Any:
        if self.step is not None and key in self.step:
            return self.step[key]
        return self.rec.get(key)


Getter = Callable[[Row], str]


def _jobid(row: Row) -> str:
    base = sf.shown_id(row.rec)
    return base if row.step is None else f"{base}.{row.step['id']}"


def _jobidraw(row: Row) -> str:
    base = str(row.rec["id"])
    return base if row.step is None else f"{base}.{row.step['id']}"


def _state(row: Row) -> str:
    if row.step is not None:
        return str(row.step.get("state") or sf.job_state(row.rec))
    state = sf.job_state(row.rec)
    if state == "CANCELLED" and row.cancelled_by:
        by = row.rec.get("cancelled_by_uid")
        if by is None:
            by = _uid_from_reason(str(row.rec.get("end_reason") or ""))
        if by is not None:
            return f"CANCELLED by {by}"
    return state


def _uid_from_reason(text: str) -> int | None:
    words = text.split()
    if len(words) >= 3 and words[0].lower() == "cancelled" and words[1] == "by":
        who = words[2]
        if who.isascii() and who.isdigit():
            return int(who)
        import pwd

        try:
            return pwd.getpwnam(who).pw_uid
        except KeyError:
            return None
    return None


def _exit(row: Row) -> str:
    if row.step is not None:
        return f"{int(row.step.get('exit_code') or 0)}:{int(row.step.get('signal') or 0)}"
    state = sf.job_state(row.rec)
    if state in ("CANCELLED", "TIMEOUT"):
        return f"{int(row.rec.get('exit_code') or 0) if state != 'TIMEOUT' else 0}:0"
    return sf.exit_code_text(row.rec)


def _nodelist(row: Row) -> str:
    if row.step is not None and row.step.get("nodes"):
        from corral.core.parse.hostlist import compress

        return compress(row.step["nodes"])
    return sf.nodelist(row.rec) or "None assigned"


def _time(key: str) -> Getter:
    def get(row: Row) -> str:
        return sf.iso(row.get(key))

    return get


def _submit(row: Row) -> str:
    if row.step is not None:
        return sf.iso(row.step.get("start_time"))
    return sf.iso(row.rec.get("submit_time"))


def _elapsed_s(row: Row) -> float:
    if row.step is None:
        return sf.elapsed_s(row.rec, row.now)
    start = row.step.get("start_time")
    if not start:
        return 0.0
    end = row.step.get("end_time") or row.now
    return max(0.0, float(end) - float(start))


def _elapsed(row: Row) -> str:
    return format_time_s(_elapsed_s(row))


def _cpus(row: Row) -> str:
    return str(int(row.get("num_cpus") or row.rec.get("num_cpus") or 0))


def _name(row: Row) -> str:
    if row.step is not None:
        return str(row.step.get("name") or row.step["id"])
    return str(row.rec.get("name") or "")


def _job_only(key: str, empty: str = "") -> Getter:
    def get(row: Row) -> str:
        if row.step is not None:
            return ""
        v = row.rec.get(key)
        return empty if v is None or v == "" else str(v)

    return get


def _str(key: str, empty: str = "") -> Getter:
    def get(row: Row) -> str:
        v = row.get(key)
        return empty if v is None or v == "" else str(v)

    return get


def _timelimit(row: Row) -> str:
    if row.step is not None:
        return ""
    limit = row.rec.get("time_limit_s")
    return "UNLIMITED" if limit is None else format_time_s(int(limit))


def _timelimit_raw(row: Row) -> str:
    if row.step is not None:
        return ""
    limit = row.rec.get("time_limit_s")
    return "UNLIMITED" if limit is None else str(int(limit) // 60)


def _total_cpu(row: Row) -> str:
    return sf.cpu_time_text(float(row.get("cpu_time_s") or 0.0))


def _cputime(row: Row) -> str:
    return format_time_s(_elapsed_s(row) * int(_cpus(row) or 0))


def _cputime_raw(row: Row) -> str:
    return str(int(_elapsed_s(row) * int(_cpus(row) or 0)))


# ---- a step's measured use (``usage`` of the step record; the batch step's is the
# job's own). Slurm prints these for step rows only, blank where it has no figure: the
# allocation line, a step not measured (still running, or srun heard from no node).
# Per-task figures (MaxRSSTask, AveRSS, MinCPU*) need a node's own figure to be one
# task's: shown when each node reporting ran one task, blank otherwise.

def _usage(row: Row) -> Record | None:
    u = row.step.get("usage") if row.step is not None else None
    return u if isinstance(u, dict) else None


def _node_use(row: Row) -> list[tuple[str, list[int] | None, Record]]:
    """(node, its task ids or None when not known, its usage) in the step's node order."""
    u = _usage(row)
    if u is None or row.step is None:
        return []
    per = u.get("nodes") or {}
    order = [str(n) for n in row.step.get("nodes") or []]
    order += sorted(n for n in per if n not in order)
    layout = row.step.get("node_tasks") or []
    out: list[tuple[str, list[int] | None, Record]] = []
    for i, name in enumerate(order):
        entry = per.get(name)
        if not isinstance(entry, dict):
            continue
        tasks = [int(t) for t in layout[i]] if i < len(layout) else None
        out.append((name, tasks, entry))
    return out


def _one_task_each(row: Row, key: str) -> list[tuple[str, int | None, float]] | None:
    """Each node's ``key`` figure with its one task, when every task of the step is a
    node's only one and every node gave the figure; else None."""
    use = _node_use(row)
    ntasks = int(row.get("ntasks") or 1)
    out: list[tuple[str, int | None, float]] = []
    for name, tasks, entry in use:
        count = len(tasks) if tasks is not None else len(entry.get("pids") or [])
        if count != 1 or entry.get(key) is None:
            return None
        out.append((name, tasks[0] if tasks else None, float(entry[key])))
    return out if out and len(out) == ntasks else None


def _mem(row: Row, mb: float) -> str:
    kb = round(mb * 1024)
    return sf.convert_num_unit(kb * 1024, 0, row.units, noconvert=row.noconvert)


def _maxrss(row: Row) -> str:
    u = _usage(row)
    if u is None or u.get("max_rss_mb") is None:
        return ""
    return _mem(row, float(u["max_rss_mb"]))


def _max_rss_node(row: Row) -> tuple[str, list[int] | None] | None:
    best: tuple[str, list[int] | None] | None = None
    top = -1.0
    for name, tasks, entry in _node_use(row):
        rss = entry.get("max_rss_mb")
        if rss is not None and float(rss) > top:
            best, top = (name, tasks), float(rss)
    return best


def _maxrss_node(row: Row) -> str:
    best = _max_rss_node(row)
    return best[0] if best is not None else ""


def _maxrss_task(row: Row) -> str:
    best = _max_rss_node(row)
    if best is None or best[1] is None or len(best[1]) != 1:
        return ""
    return str(best[1][0])


def _averss(row: Row) -> str:
    each = _one_task_each(row, "max_rss_mb")
    if each is None:
        return ""
    total_bytes = sum(round(rss * 1024) * 1024 for _n, _t, rss in each)
    return sf.convert_num_unit(total_bytes // len(each), 0, row.units,
                               noconvert=row.noconvert)


def _avecpu(row: Row) -> str:
    u = _usage(row)
    if u is None or u.get("cpu_time_s") is None:
        return ""
    return sf.cpu_time_text(float(u["cpu_time_s"]) / int(row.get("ntasks") or 1),
                            subsec=False)


def _min_cpu(row: Row) -> tuple[str, int | None, float] | None:
    each = _one_task_each(row, "cpu_time_s")
    return min(each, key=lambda e: e[2]) if each else None


def _mincpu(row: Row) -> str:
    low = _min_cpu(row)
    return sf.cpu_time_text(low[2], subsec=False) if low is not None else ""


def _mincpu_node(row: Row) -> str:
    low = _min_cpu(row)
    return low[0] if low is not None else ""


def _mincpu_task(row: Row) -> str:
    low = _min_cpu(row)
    return str(low[1]) if low is not None and low[1] is not None else ""


def _reqmem(row: Row) -> str:
    if row.step is not None:
        return ""
    text, _per_cpu = sf.mem_text(row.rec)
    return text if text != "0" else "0n"


def _tres(row: Row) -> str:
    return str(row.rec.get("tres") or "")


def _alloc_tres(row: Row) -> str:
    if sf.is_pending(row.rec):
        return ""
    return _tres(row)


def _reason(row: Row) -> str:
    if row.step is not None:
        return ""
    return sf.reason(row.rec)


def _user(row: Row) -> str:
    return "" if row.step is not None else sf.user_of(row.rec)


def _uid(row: Row) -> str:
    return "" if row.step is not None else str(int(row.rec.get("uid") or 0))


def _group(row: Row) -> str:
    return "" if row.step is not None else sf.group_name(int(row.rec.get("gid") or 0))


def _gid(row: Row) -> str:
    return "" if row.step is not None else str(int(row.rec.get("gid") or 0))


def _ntasks(row: Row) -> str:
    if row.step is None:
        return ""
    return str(int(row.step.get("ntasks") or 1))


def _nnodes(row: Row) -> str:
    if row.step is not None and row.step.get("nodes"):
        return str(len(row.step["nodes"]))
    return str(int(row.rec.get("num_nodes") or 1))


def _cluster(row: Row) -> str:
    return row.cluster


def _elapsed_raw(row: Row) -> str:
    return str(int(_elapsed_s(row)))


def _array_job(row: Row) -> str:
    return str(sf.array_job_id(row.rec)) if sf.is_array(row.rec) else ""


def _array_task(row: Row) -> str:
    t = row.rec.get("array_task_id")
    return "" if t is None else str(t)


def _mem_req(row: Row) -> str:
    mb = int(row.rec.get("mem_per_node_mb") or 0)
    return format_mem_mb(mb) if mb else ""


# lower-case name -> (Name, default width, getter); negative width: left-justified
FIELDS: dict[str, tuple[str, int, Getter]] = {}


def _add(name: str, width: int, getter: Getter) -> None:
    FIELDS[name.lower()] = (name, width, getter)


for _n, _w, _g in (
    ("Account", 10, _job_only("account")),
    ("AdminComment", 15, lambda r: ""),
    ("AllocCPUS", 10, _cpus),
    ("AllocNodes", 10, lambda r: "" if sf.is_pending(r.rec) else _nnodes(r)),
    ("AllocTRES", 10, _alloc_tres),
    ("ArrayJobID", 15, _array_job),
    ("ArrayTaskID", 15, _array_task),
    ("AssocID", 10, lambda r: "0"),
    ("AveCPU", 10, _avecpu),
    ("AveCPUFreq", 10, lambda r: ""),
    ("AveDiskRead", 14, lambda r: ""),
    ("AveDiskWrite", 14, lambda r: ""),
    ("AvePages", 10, lambda r: ""),
    ("AveRSS", 10, _averss),
    ("AveVMSize", 10, lambda r: ""),
    ("BlockID", 16, lambda r: ""),
    ("Cluster", 10, _cluster),
    ("Comment", 14, _job_only("comment")),
    ("Constraints", 19, _job_only("constraint")),
    ("ConsumedEnergy", 14, lambda r: "0"),
    ("ConsumedEnergyRaw", 17, lambda r: "0"),
    ("CPUTime", 10, _cputime),
    ("CPUTimeRAW", 10, _cputime_raw),
    ("DBIndex", 10, lambda r: str(r.rec["id"])),
    ("DerivedExitCode", 15, lambda r: "" if r.is_step else sf.exit_code_text(r.rec)),
    ("Elapsed", 10, _elapsed),
    ("ElapsedRaw", 10, _elapsed_raw),
    ("Eligible", 19, lambda r: "" if r.is_step else sf.iso(r.rec.get("eligible_time"))),
    ("End", 19, _time("end_time")),
    ("ExitCode", 8, _exit),
    ("Flags", 12, lambda r: ""),
    ("GID", 6, _gid),
    ("Group", 9, _group),
    ("JobID", -12, _jobid),
    ("JobIDRaw", -12, _jobidraw),
    ("JobName", 10, _name),
    ("Layout", 8, lambda r: "Unknown" if r.is_step else ""),
    ("MaxDiskRead", 12, lambda r: ""),
    ("MaxDiskReadNode", 15, lambda r: ""),
    ("MaxDiskReadTask", 15, lambda r: ""),
    ("MaxDiskWrite", 12, lambda r: ""),
    ("MaxDiskWriteNode", 16, lambda r: ""),
    ("MaxDiskWriteTask", 16, lambda r: ""),
    ("MaxPages", 8, lambda r: ""),
    ("MaxPagesNode", 12, lambda r: ""),
    ("MaxPagesTask", 14, lambda r: ""),
    ("MaxRSS", 10, _maxrss),
    ("MaxRSSNode", 10, _maxrss_node),
    ("MaxRSSTask", 10, _maxrss_task),
    ("MaxVMSize", 10, lambda r: ""),
    ("MaxVMSizeNode", 14, lambda r: ""),
    ("MaxVMSizeTask", 14, lambda r: ""),
    ("McsLabel", 10, lambda r: ""),
    ("MinCPU", 10, _mincpu),
    ("MinCPUNode", 10, _mincpu_node),
    ("MinCPUTask", 10, _mincpu_task),
    ("NCPUS", 10, _cpus),
    ("NNodes", 8, _nnodes),
    ("NodeList", 15, _nodelist),
    ("NTasks", 8, _ntasks),
    ("Partition", 10, _job_only("partition")),
    ("Priority", 10, lambda r: "" if r.is_step else str(int(float(r.rec.get("priority") or 0)))),
    ("QOS", 10, _job_only("qos", "normal")),
    ("QOSRAW", 10, lambda r: "" if r.is_step else "1"),
    ("Reason", 22, _reason),
    ("ReqCPUFreq", 13, lambda r: "Unknown"),
    ("ReqCPUFreqGov", 13, lambda r: "Unknown"),
    ("ReqCPUFreqMax", 13, lambda r: "Unknown"),
    ("ReqCPUFreqMin", 13, lambda r: "Unknown"),
    ("ReqCPUS", 8, lambda r: "" if r.is_step else str(int(r.rec.get("num_cpus") or 1))),
    ("ReqMem", 10, _reqmem),
    ("ReqNodes", 8, lambda r: "" if r.is_step else str(int(r.rec.get("num_nodes") or 1))),
    ("ReqTRES", 10, lambda r: "" if r.is_step else _tres(r)),
    ("Reservation", 20, lambda r: ""),
    ("Runtime", 9, _job_only("runtime")),  # Corral: host, container or vm (not in Slurm)
    ("ReservationId", 20, lambda r: ""),
    ("Reserved", 10, lambda r: "00:00:00"),
    ("Start", 19, _time("start_time")),
    ("State", 10, _state),
    ("Submit", 19, _submit),
    ("SubmitLine", 20, lambda r: ""),
    ("Suspended", 10, lambda r: "00:00:00"),
    ("SystemComment", 15, lambda r: ""),
    ("SystemCPU", 10, lambda r: "00:00:00"),
    ("Timelimit", 10, _timelimit),
    ("TimelimitRaw", 10, _timelimit_raw),
    ("TotalCPU", 10, _total_cpu),
    ("TRESUsageInAve", 14, lambda r: ""),
    ("TRESUsageInMax", 14, lambda r: ""),
    ("TRESUsageInMaxNode", 18, lambda r: ""),
    ("TRESUsageInMaxTask", 18, lambda r: ""),
    ("TRESUsageInMin", 14, lambda r: ""),
    ("TRESUsageInMinNode", 18, lambda r: ""),
    ("TRESUsageInMinTask", 18, lambda r: ""),
    ("TRESUsageInTot", 14, lambda r: ""),
    ("TRESUsageOutAve", 15, lambda r: ""),
    ("TRESUsageOutMax", 15, lambda r: ""),
    ("TRESUsageOutMaxNode", 19, lambda r: ""),
    ("TRESUsageOutMaxTask", 19, lambda r: ""),
    ("TRESUsageOutMin", 15, lambda r: ""),
    ("TRESUsageOutMinNode", 19, lambda r: ""),
    ("TRESUsageOutMinTask", 19, lambda r: ""),
    ("TRESUsageOutTot", 15, lambda r: ""),
    ("UID", 6, _uid),
    ("User", 9, _user),
    ("UserCPU", 10, _total_cpu),
    ("WCKey", 10, lambda r: ""),
    ("WCKeyID", 7, lambda r: "0"),
    ("WorkDir", 20, _job_only("workdir")),
):
    _add(_n, _w, _g)

DEFAULT_FIELDS = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
BRIEF_FIELDS = "JobID,State,ExitCode"
LONG_FIELDS = (
    "JobID,JobIDRaw,JobName,Partition,MaxVMSize,MaxVMSizeNode,MaxVMSizeTask,AveVMSize,"
    "MaxRSS,MaxRSSNode,MaxRSSTask,AveRSS,MaxPages,MaxPagesNode,MaxPagesTask,AvePages,"
    "MinCPU,MinCPUNode,MinCPUTask,AveCPU,NTasks,AllocCPUS,Elapsed,State,ExitCode,"
    "AveCPUFreq,ReqCPUFreqMin,ReqCPUFreqMax,ReqCPUFreqGov,ReqMem,ConsumedEnergy,"
    "MaxDiskRead,MaxDiskReadNode,MaxDiskReadTask,AveDiskRead,MaxDiskWrite,"
    "MaxDiskWriteNode,MaxDiskWriteTask,AveDiskWrite,ReqTRES,AllocTRES,TRESUsageInAve,"
    "TRESUsageInMax,TRESUsageInMaxNode,TRESUsageInMaxTask,TRESUsageInMin,"
    "TRESUsageInMinNode,TRESUsageInMinTask,TRESUsageInTot,TRESUsageOutMax,"
    "TRESUsageOutMaxNode,TRESUsageOutMaxTask,TRESUsageOutAve,TRESUsageOutTot"
)


class FieldError(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(f'Invalid field requested: "{name}"')
        self.name = name


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    width: int  # >0 right-justified, <0 left-justified
    getter: Getter


MAX_WIDTH = 1024  # widest sacct field (docs/shims.md, fidelity choice 9)


def parse_fields(spec: str) -> list[Column]:
    """``JobID,State%20,NodeList%-30`` -> columns (``%N`` right, ``%-N`` left, N wide)."""
    cols: list[Column] = []
    for raw in spec.split(","):
        raw = raw.strip()
        if not raw:
            continue
        name, pct, width_s = raw.partition("%")
        entry = FIELDS.get(name.lower())
        if entry is None:
            raise FieldError(name)
        canon, width, getter = entry
        if pct:
            digits = width_s[1:] if width_s.startswith("-") else width_s
            if not (digits.isascii() and digits.isdigit()):
                raise FieldError(raw)
            given = int(width_s)
            # Slurm: "%N" right-justifies, "%-N" left-justifies; at most MAX_WIDTH wide
            # (as squeue's: one request must not build a huge answer)
            width = max(-MAX_WIDTH, min(MAX_WIDTH, given))
            if width == 0:
                width = entry[1]
        cols.append(Column(canon, width, getter))
    return cols


def render(cols: list[Column], rows: list[Row], *, header: bool, mode: str,
           delimiter: str = "|") -> list[str]:
    """``mode``: ``fixed``, ``parsable`` (trailing delimiter) or ``parsable2``."""
    lines: list[str] = []
    if mode == "fixed":
        fit = sf.fit_sacct
        if header:
            lines.append("".join(fit(c.name, abs(c.width), c.width > 0) + " " for c in cols))
            lines.append("".join("-" * abs(c.width) + " " for c in cols))
        for row in rows:
            lines.append("".join(fit(c.getter(row), abs(c.width), c.width > 0) + " "
                                 for c in cols))
        return lines
    tail = delimiter if mode == "parsable" else ""
    if header:
        lines.append(delimiter.join(c.name for c in cols) + tail)
    for row in rows:
        lines.append(delimiter.join(c.getter(row) for c in cols) + tail)
    return lines
