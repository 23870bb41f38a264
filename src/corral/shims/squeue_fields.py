"""``squeue`` output fields: ``-o "%.18i %.9P"`` and ``-O "JobID:10,State"`` formats.

``-o`` items are ``%[.][size]<letter>``: ``.`` right-justifies, ``size`` cuts and pads
(Slurm's ``_print_str``), no size prints the value as is; text between items is copied.
``-O`` items are ``Name[:[.][size][suffix]]`` separated by commas, 20 wide by default and
left-justified, each followed by its suffix. Headers are Slurm's (``src/squeue/print.c``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corral.core.parse.timefmt import format_squeue_time_s
from corral.shims import slurmfmt as sf

Record = dict[str, Any]
Getter = Callable[[Record, float], str]

DEFAULT_FORMAT = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
LONG_FORMAT = "%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"


class FormatError(ValueError):
    pass


def _reason_list(rec: Record, now: float) -> str:
    """``%R``: ``(reason)`` for pending and failed-ish jobs, else the node list."""
    if sf.job_state(rec) in _REASON_STATES:
        return f"({sf.reason(rec)})"
    return sf.nodelist(rec)


_REASON_STATES = frozenset({"PENDING", "TIMEOUT", "OUT_OF_MEMORY", "DEADLINE", "FAILED"})


def _time_used(rec: Record, now: float) -> str:
    return format_squeue_time_s(sf.elapsed_s(rec, now))


def _time_left(rec: Record, now: float) -> str:
    limit = rec.get("time_limit_s")
    if limit is None:
        return "UNLIMITED"
    return format_squeue_time_s(max(0.0, float(limit) - sf.elapsed_s(rec, now)))


def _time_limit(rec: Record, now: float) -> str:
    limit = rec.get("time_limit_s")
    return format_squeue_time_s(None if limit is None else int(limit))


def _start(rec: Record, now: float) -> str:
    start = rec.get("start_time")
    if start:
        return sf.iso(start)
    return sf.iso(rec.get("est_start"), "N/A")


def _end(rec: Record, now: float) -> str:
    end = rec.get("end_time")
    if end:
        return sf.iso(end)
    start = rec.get("start_time")
    limit = rec.get("time_limit_s")
    if start and limit is not None:
        return sf.iso(float(start) + float(limit))
    return "N/A"


def _priority_float(rec: Record, now: float) -> str:
    p = float(rec.get("priority") or 0.0)
    return f"{p / 4294967296.0:.14f}" if p >= 1.0 else f"{p:.14f}"


def _priority_int(rec: Record, now: float) -> str:
    return str(int(float(rec.get("priority") or 0)))


def _array_task(rec: Record, now: float) -> str:
    if rec.get("display") and rec.get("members"):
        return str(rec["display"]).split("_", 1)[1].strip("[]")
    t = rec.get("array_task_id")
    return "N/A" if t is None else str(t)


def _dependency(rec: Record, now: float) -> str:
    dep = rec.get("dependency") or ""
    return str(dep) if dep else "(null)"


def _str(key: str, empty: str = "") -> Getter:
    def get(rec: Record, now: float) -> str:
        v = rec.get(key)
        return empty if v is None or v == "" else str(v)

    return get


def _cpus_req(rec: Record, now: float) -> str:
    return str(int(rec.get("num_cpus") or 1))


def _min_cpus(rec: Record, now: float) -> str:
    return str(int(rec.get("cpus_per_task") or 1))


def _mem(rec: Record, now: float) -> str:
    return sf.mem_text(rec)[0]


def _command(rec: Record, now: float) -> str:
    return str(rec.get("command") or "(null)")


# letter -> (header, getter)
JOB_FIELDS: dict[str, tuple[str, Getter]] = {
    "a": ("ACCOUNT", _str("account", "(null)")),
    "A": ("JOBID", lambda r, n: str(r["id"])),
    "B": ("EXEC_HOST", lambda r, n: sf.batch_host(r) or "n/a"),
    "c": ("MIN_CPUS", _min_cpus),
    "C": ("CPUS", _cpus_req),
    "d": ("MIN_TMP_DISK", lambda r, n: "0"),
    "D": ("NODES", lambda r, n: str(int(r.get("num_nodes") or 1))),
    "e": ("END_TIME", _end),
    "E": ("DEPENDENCY", _dependency),
    "f": ("FEATURES", lambda r, n: str(r.get("constraint") or "(null)")),
    "F": ("ARRAY_JOB_ID", lambda r, n: str(sf.array_job_id(r))),
    "g": ("GROUP", lambda r, n: sf.group_name(int(r.get("gid") or 0))),
    "G": ("GROUP", lambda r, n: str(int(r.get("gid") or 0))),
    "h": ("OVER_SUBSCRIBE", lambda r, n: "NO" if r.get("exclusive") else "OK"),
    "i": ("JOBID", lambda r, n: sf.shown_id(r)),
    "j": ("NAME", _str("name")),
    "k": ("COMMENT", _str("comment", "(null)")),
    "K": ("ARRAY_TASK_ID", _array_task),
    "l": ("TIME_LIMIT", _time_limit),
    "L": ("TIME_LEFT", _time_left),
    "m": ("MIN_MEMORY", _mem),
    "M": ("TIME", _time_used),
    "n": ("REQ_NODES", lambda r, n: ""),
    "N": ("NODELIST", lambda r, n: sf.nodelist(r)),
    "o": ("COMMAND", _command),
    "O": ("CONTIGUOUS", lambda r, n: "0"),
    "p": ("PRIORITY", _priority_float),
    "P": ("PARTITION", _str("partition")),
    "q": ("QOS", _str("qos", "(null)")),
    "Q": ("PRIORITY", _priority_int),
    "r": ("REASON", lambda r, n: sf.reason(r)),
    "R": ("NODELIST(REASON)", _reason_list),
    "S": ("START_TIME", _start),
    "t": ("ST", lambda r, n: sf.state_short(sf.shown_state(r))),
    "T": ("STATE", lambda r, n: sf.shown_state(r)),
    "u": ("USER", lambda r, n: sf.user_of(r)),
    "U": ("UID", lambda r, n: str(int(r.get("uid") or 0))),
    "v": ("RESERVATION", lambda r, n: "(null)"),
    "V": ("SUBMIT_TIME", lambda r, n: sf.iso(r.get("submit_time"))),
    "w": ("WCKEY", lambda r, n: "(null)"),
    "W": ("LICENSES", lambda r, n: "(null)"),
    "x": ("EXC_NODES", lambda r, n: ""),
    "y": ("NICE", lambda r, n: str(int(r.get("nice") or 0))),
    "Y": ("SCHEDNODES", lambda r, n: "(null)"),
    "z": ("S:C:T", lambda r, n: "*:*:*"),
    "Z": ("WORK_DIR", _str("workdir")),
}

# -O/--Format long names (case-insensitive) -> letter of JOB_FIELDS, or own getter
LONG_FIELDS: dict[str, tuple[str, Getter]] = {
    "account": JOB_FIELDS["a"],
    "arrayjobid": JOB_FIELDS["F"],
    "arraytaskid": JOB_FIELDS["K"],
    "batchhost": JOB_FIELDS["B"],
    "command": JOB_FIELDS["o"],
    "comment": JOB_FIELDS["k"],
    "cpuspertask": ("CPUS_PER_TASK", _min_cpus),
    "dependency": JOB_FIELDS["E"],
    "endtime": JOB_FIELDS["e"],
    "exit_code": ("EXIT_CODE", lambda r, n: sf.exit_code_text(r)),
    "feature": JOB_FIELDS["f"],
    "groupid": JOB_FIELDS["G"],
    "groupname": JOB_FIELDS["g"],
    "jobarrayid": ("JOBID", lambda r, n: sf.shown_id(r)),
    "jobid": ("JOBID", lambda r, n: str(r["id"])),
    "minmemory": JOB_FIELDS["m"],
    "mincpus": JOB_FIELDS["c"],
    "name": JOB_FIELDS["j"],
    "nice": JOB_FIELDS["y"],
    "nodelist": JOB_FIELDS["N"],
    "numcpus": JOB_FIELDS["C"],
    "numnodes": JOB_FIELDS["D"],
    "numtasks": ("TASKS", lambda r, n: str(int(r.get("num_tasks") or 1))),
    "partition": JOB_FIELDS["P"],
    "priority": JOB_FIELDS["p"],
    "prioritylong": JOB_FIELDS["Q"],
    "qos": JOB_FIELDS["q"],
    "reason": JOB_FIELDS["r"],
    "runtime": ("RUNTIME", _str("runtime", "host")),  # Corral: host, container or vm
    "reasonlist": JOB_FIELDS["R"],
    "starttime": JOB_FIELDS["S"],
    "state": JOB_FIELDS["T"],
    "statecompact": JOB_FIELDS["t"],
    "stderr": ("STDERR", _str("stderr")),
    "stdin": ("STDIN", lambda r, n: "/dev/null"),
    "stdout": ("STDOUT", _str("stdout")),
    "submittime": JOB_FIELDS["V"],
    "timeleft": JOB_FIELDS["L"],
    "timelimit": JOB_FIELDS["l"],
    "timeused": JOB_FIELDS["M"],
    "userid": JOB_FIELDS["U"],
    "username": JOB_FIELDS["u"],
    "workdir": JOB_FIELDS["Z"],
}


@dataclass(frozen=True, slots=True)
class Item:
    """One piece of a format: a literal (``getter`` None) or a field."""

    text: str  # literal text, or the header
    getter: Getter | None = None
    width: int = 0
    right: bool = False


def parse_format(fmt: str, fields: dict[str, tuple[str, Getter]] | None = None
                 ) -> list[Item]:
    """Parse an ``-o`` format string (job letters, or ``fields``: the step letters)."""
    table = JOB_FIELDS if fields is None else fields
    items: list[Item] = []
    lit: list[str] = []
    i, n = 0, len(fmt)
    while i < n:
        ch = fmt[i]
        if ch != "%":
            lit.append(ch)
            i += 1
            continue
        i += 1
        if i < n and fmt[i] == "%":
            lit.append("%")
            i += 1
            continue
        right = False
        if i < n and fmt[i] == ".":
            right = True
            i += 1
        start = i
        while i < n and "0" <= fmt[i] <= "9":
            i += 1
        width = min(int(fmt[start:i]), MAX_WIDTH) if i > start else 0
        if i >= n:
            break  # a trailing '%' prints nothing, as in squeue
        letter = fmt[i]
        i += 1
        field = table.get(letter)
        if field is None:
            lit.append(f"%{letter}")  # squeue prints unknown specifiers literally
            continue
        if lit:
            items.append(Item("".join(lit)))
            lit = []
        items.append(Item(field[0], field[1], width, right))
    if lit:
        items.append(Item("".join(lit)))
    return items


MAX_WIDTH = 1024  # widest field printed (docs/shims.md): '%99999999i' must not build GBs


def parse_long_format(fmt: str) -> list[Item]:
    """Parse an ``-O``/``--Format`` list: ``Name[:[.][size][suffix]]`` comma separated."""
    items: list[Item] = []
    for raw in fmt.split(","):
        if not raw:
            continue
        name, colon, spec = raw.partition(":")
        field = LONG_FIELDS.get(name.lower().replace("_", "").replace("-", ""))
        if field is None:
            raise FormatError(f"Invalid job format specification: {name}")
        right = False
        width = 20
        suffix = ""
        if colon:
            if spec.startswith("."):
                right = True
                spec = spec[1:]
            digits = ""
            while spec and "0" <= spec[0] <= "9":
                digits += spec[0]
                spec = spec[1:]
            if digits:
                width = min(int(digits), MAX_WIDTH)
            suffix = spec
        items.append(Item(field[0], field[1], width, right))
        if suffix:
            items.append(Item(suffix))
    return items


def line_format(items: list[Item]) -> str:
    """One printf-style format for a whole line: ``%W.Ws`` cuts and pads in C."""
    parts = []
    for it in items:
        if it.getter is None:
            parts.append(it.text.replace("%", "%%"))
        elif it.width <= 0:
            parts.append("%s")
        else:
            parts.append(f"%{'' if it.right else '-'}{it.width}.{it.width}s")
    return "".join(parts)


class LineRenderer:
    """One format's lines: ``renderer(rec, now)`` is a record's line, ``header`` the
    header line, ``key`` what tells two formats apart (``squeue_memo`` views)."""

    def __init__(self, items: list[Item]) -> None:
        self.fmt = line_format(items)
        self.getters = [it.getter for it in items if it.getter is not None]
        self.header = self.fmt % tuple(it.text for it in items if it.getter is not None)
        self.key = (self.fmt, tuple(self.getters))

    def __call__(self, rec: Record, now: float) -> str:
        return self.fmt % tuple([g(rec, now) for g in self.getters])


def line_renderer(items: list[Item]) -> LineRenderer:
    return LineRenderer(items)


def render(items: list[Item], rows: list[Record], now: float, header: bool) -> list[str]:
    """Lines of output (no newline)."""
    fmt = line_format(items)
    getters = [it.getter for it in items if it.getter is not None]
    lines: list[str] = []
    if header:
        lines.append(fmt % tuple(it.text for it in items if it.getter is not None))
    for rec in rows:
        lines.append(fmt % tuple([g(rec, now) for g in getters]))
    return lines
