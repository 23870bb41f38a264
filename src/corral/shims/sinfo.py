"""``sinfo``: partitions and nodes in Slurm 22.05's formats.

Lines group the nodes of a partition that print the same (state, CPUs, ...), as Slurm
does; ``-N`` prints one line per node and partition. Clients parse ``sinfo -o %C``
(``CPUS(A/I/O/T)`` then ``alloc/idle/other/total``: dask-jobqueue's test gate) and
``sinfo -o %P`` (partition names, the default one with ``*``: snakemake).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corral.core.parse.timefmt import format_squeue_time_s
from corral.frontends.getopt import Arg, GetoptError, Opt, OptionTable, getopt_long
from corral.shims import slurmfmt as sf
from corral.shims.context import Client, Context

MAX_WIDTH = 1024  # widest field printed, as squeue (docs/shims.md)

Record = dict[str, Any]
R, N = Arg.REQUIRED, Arg.NONE
TABLE = OptionTable.of([
    Opt("all", ("all",), "a", N),
    Opt("dead", ("dead",), "d", N),
    Opt("exact", ("exact",), "e", N),
    Opt("federation", ("federation",), None, N),
    Opt("format", ("format",), "o", R),
    Opt("Format", ("Format",), "O", R),
    Opt("help", ("help",), None, N),
    Opt("hide", ("hide",), None, N),
    Opt("iterate", ("iterate",), "i", R),
    Opt("json", ("json",), None, N),
    Opt("list_reasons", ("list-reasons",), "R", N),
    Opt("local", ("local",), None, N),
    Opt("long", ("long",), "l", N),
    Opt("clusters", ("clusters", "cluster"), "M", R),
    Opt("noconvert", ("noconvert",), None, N),
    Opt("Node", ("Node",), "N", N),
    Opt("nodes", ("nodes",), "n", R),
    Opt("noheader", ("noheader",), "h", N),
    Opt("partition", ("partition",), "p", R),
    Opt("responding", ("responding",), "r", N),
    Opt("reservation", ("reservation",), "T", N),
    Opt("sort", ("sort",), "S", R),
    Opt("states", ("states",), "t", R),
    Opt("summarize", ("summarize",), "s", N),
    Opt("usage", ("usage",), None, N),
    Opt("verbose", ("verbose",), "v", N),
    Opt("version", ("version",), "V", N),
    Opt("yaml", ("yaml",), None, N),
])
DEFAULT = "%#P %.5a %.10l %.6D %.6t %N"
LONG = "%#P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N"
NODE = "%#N %.6D %#P %6t"
NODE_LONG = "%#N %.6D %.#P %.11T %4c %.8z %.6m %.8d %.6w %.8f %20E"
SUMMARY = "%#P %.5a %.10l %.16F %N"
REASONS = "%20E %9u %19H %N"

_COMPACT = {"IDLE": "idle", "MIXED": "mix", "ALLOCATED": "alloc", "DRAINING": "drng",
            "DRAINED": "drain", "DOWN": "down", "UNKNOWN": "unk", "FUTURE": "futr"}
_LONG = {"IDLE": "idle", "MIXED": "mixed", "ALLOCATED": "allocated", "DRAINING": "draining",
         "DRAINED": "drained", "DOWN": "down", "UNKNOWN": "unknown", "FUTURE": "future"}


@dataclass
class Group:
    part: Record
    nodes: list[Record]


def _state(nodes: list[Record], table: dict[str, str]) -> str:
    if not nodes:
        return "n/a"
    n = nodes[0]
    text = table.get(str(n.get("state")), str(n.get("state")).lower())
    power = {"POWERED_DOWN": "~", "POWERING_UP": "#", "POWERING_DOWN": "%"}.get(
        str(n.get("power") or ""))
    if power:  # Slurm's power-saving suffixes (corral.controller.power)
        return text + power
    if n.get("connected") is False and n.get("state") not in ("DOWN", "FUTURE"):
        text += "*"
    return text


def _other(n: Record) -> bool:
    return str(n.get("state")) in ("DOWN", "DRAINED", "DRAINING", "UNKNOWN", "FUTURE")


def _cpus_aiot(g: Group) -> str:
    a = i = o = t = 0
    for n in g.nodes:
        cpus = int(n.get("cpus") or 0)
        alloc = int(n.get("alloc_cpus") or 0)
        t += cpus
        if _other(n):
            o += cpus - alloc
            a += alloc
        else:
            a += alloc
            i += cpus - alloc
    return f"{a}/{i}/{o}/{t}"


def _nodes_aiot(g: Group) -> str:
    a = i = o = 0
    for n in g.nodes:
        st = str(n.get("state"))
        if _other(n):
            o += 1
        elif st in ("MIXED", "ALLOCATED"):
            a += 1
        else:
            i += 1
    return f"{a}/{i}/{o}/{len(g.nodes)}"


def _nodelist(g: Group) -> str:
    from corral.core.parse.hostlist import compress

    return compress([str(n["name"]) for n in g.nodes])


def _hostnames(g: Group) -> str:
    from corral.core.parse.hostlist import compress

    return compress([str(n.get("hostname") or n["name"]) for n in g.nodes])


def _nodeaddrs(g: Group) -> str:
    from corral.core.parse.hostlist import compress
    from corral.shims.scontrol_show import node_addr

    return compress([node_addr(n) for n in g.nodes])


def _timelimit(g: Group) -> str:
    v = g.part.get("max_time_s")
    return "infinite" if v is None else format_squeue_time_s(int(v), unlimited="infinite")


def _same(key: str) -> Callable[[Group], str]:
    def get(g: Group) -> str:
        vals = sorted({str(n.get(key) if n.get(key) is not None else 0) for n in g.nodes})
        if not vals:
            return "0"
        return vals[0] if len(vals) == 1 else f"{vals[0]}+"

    return get


def _partition(g: Group) -> str:
    return str(g.part["name"]) + ("*" if g.part.get("default") else "")


def _mem(g: Group) -> str:
    return _same("mem_mb")(g)


def _first(g: Group) -> Record:
    return g.nodes[0] if g.nodes else {}


def _sct(g: Group) -> str:
    n = _first(g)
    return (f"{int(n.get('sockets') or 1)}:{int(n.get('cores_per_socket') or 1)}:"
            f"{int(n.get('threads_per_core') or 1)}")


def _features(g: Group) -> str:
    return ",".join(_first(g).get("features") or []) or "(null)"


def _reason(g: Group) -> str:
    return str(_first(g).get("reason") or "none")


def _gres(g: Group) -> str:
    n = _first(g)
    parts = [f"gpu:{t}:{c}" for t, c in sorted((n.get("gpu_types") or {}).items())]
    if not parts and n.get("gpus"):
        parts = [f"gpu:{n['gpus']}"]
    return ",".join(parts) or "(null)"


# letter -> (header, getter, group-key?)
FIELDS: dict[str, tuple[str, Callable[[Group], str]]] = {
    "a": ("AVAIL", lambda g: "up" if str(g.part.get("state") or "UP") == "UP" else "down"),
    "A": ("NODES(A/I)", lambda g: "/".join(_nodes_aiot(g).split("/")[:2])),
    "c": ("CPUS", _same("cpus")),
    "C": ("CPUS(A/I/O/T)", _cpus_aiot),
    "d": ("TMP_DISK", lambda g: "0"),
    "D": ("NODES", lambda g: str(len(g.nodes))),
    "e": ("FREE_MEM", _same("free_mem_mb")),
    "E": ("REASON", _reason),
    "f": ("AVAIL_FEATURES", _features),
    "b": ("ACTIVE_FEATURES", _features),
    "F": ("NODES(A/I/O/T)", _nodes_aiot),
    "g": ("GROUPS", lambda g: "all"),
    "G": ("GRES", _gres),
    "h": ("OVERSUBSCRIBE", lambda g: "EXCLUSIVE" if g.part.get("exclusive") else "NO"),
    "l": ("TIMELIMIT", _timelimit),
    "L": ("DEFAULTTIME", lambda g: "n/a" if g.part.get("default_time_s") is None
          else format_squeue_time_s(int(g.part["default_time_s"]))),
    "m": ("MEMORY", _mem),
    "n": ("HOSTNAMES", _hostnames),
    "N": ("NODELIST", _nodelist),
    "o": ("NODE_ADDR", _nodeaddrs),
    "O": ("CPU_LOAD", lambda g: "N/A"),
    "p": ("PRIO_TIER", lambda g: str(int(g.part.get("priority_tier") or 1))),
    "P": ("PARTITION", _partition),
    "R": ("PARTITION", lambda g: str(g.part["name"])),
    "r": ("ROOT", lambda g: "no"),
    "s": ("JOB_SIZE", lambda g: f"1-{g.part.get('max_nodes') or 'infinite'}"),
    "t": ("STATE", lambda g: _state(g.nodes, _COMPACT)),
    "T": ("STATE", lambda g: _state(g.nodes, _LONG)),
    "u": ("USER", lambda g: "root"),
    "H": ("TIMESTAMP", lambda g: "Unknown"),
    "w": ("WEIGHT", _same("weight")),
    "X": ("SOCKETS", _same("sockets")),
    "Y": ("CORES", _same("cores_per_socket")),
    "Z": ("THREADS", _same("threads_per_core")),
    "z": ("S:C:T", _sct),
}


@dataclass(frozen=True)
class Item:
    text: str
    letter: str | None = None
    width: int = 0
    right: bool = False
    auto: bool = False  # '#': as wide as the widest value (and the header)


def parse_format(fmt: str) -> list[Item]:
    items: list[Item] = []
    lit = ""
    i, n = 0, len(fmt)
    while i < n:
        if fmt[i] != "%":
            lit += fmt[i]
            i += 1
            continue
        i += 1
        right = auto = False
        while i < n and fmt[i] in ".#":
            right = right or fmt[i] == "."
            auto = auto or fmt[i] == "#"
            i += 1
        start = i
        while i < n and "0" <= fmt[i] <= "9":
            i += 1
        width = min(int(fmt[start:i]), MAX_WIDTH) if i > start else 0
        if i >= n:
            break
        letter = fmt[i]
        i += 1
        if letter not in FIELDS:
            lit += f"%{letter}"
            continue
        if lit:
            items.append(Item(lit))
            lit = ""
        items.append(Item(FIELDS[letter][0], letter, width, right, auto))
    if lit:
        items.append(Item(lit))
    return items


def _groups(parts: list[Record], nodes: list[Record], items: list[Item],
            per_node: bool) -> list[Group]:
    by_name = {str(n["name"]): n for n in nodes}
    keys = [it.letter for it in items if it.letter and it.letter not in "NnoDCFAP"]
    out: list[Group] = []
    for part in parts:
        members = [by_name[x] for x in part.get("nodes") or [] if x in by_name]
        if per_node:
            out.extend(Group(part, [m]) for m in members)
            continue
        buckets: dict[tuple[str, ...], list[Record]] = {}
        for m in members:
            k = tuple(FIELDS[x][1](Group(part, [m])) for x in keys)
            buckets.setdefault(k, []).append(m)
        if not members:
            out.append(Group(part, []))
        out.extend(Group(part, ms) for ms in buckets.values())
    return out


def render(items: list[Item], groups: list[Group], header: bool) -> list[str]:
    values = [[FIELDS[it.letter][1](g) if it.letter else "" for it in items] for g in groups]
    widths = []
    for col, it in enumerate(items):
        w = it.width
        if it.auto and it.letter:
            longest = max((len(row[col]) for row in values), default=0)
            w = max(w, len(it.text) + (1 if it.letter == "N" else 0), longest)
        widths.append(w)
    lines = []
    if header:
        lines.append("".join(
            it.text if it.letter is None else sf.fit(it.text, widths[c], it.right)
            for c, it in enumerate(items)))
    for row in values:
        lines.append("".join(
            it.text if it.letter is None else sf.fit(row[c], widths[c], it.right)
            for c, it in enumerate(items)))
    return lines


def run(ctx: Context, client: Client) -> None:
    try:
        parsed, positional = getopt_long(ctx.argv, TABLE, "sinfo", stop_at_positional=False)
    except GetoptError as exc:
        raise ctx.fail(f"{exc.message}\nTry \"sinfo --help\" for more information") from None
    opts: dict[str, list[str | None]] = {}
    for p in parsed:
        opts.setdefault(p.opt.key, []).append(p.value)

    def last(key: str) -> str | None:
        vals = [v for v in opts.get(key, []) if v is not None]
        return vals[-1] if vals else None

    if "help" in opts or "usage" in opts:
        ctx.print("Usage: sinfo [OPTIONS]")
        return
    if "version" in opts:
        ctx.print("slurm 22.05.8")
        return
    if positional:
        raise ctx.fail(f"sinfo: error: Unrecognized option: {positional[0]}")
    if "json" in opts or "yaml" in opts or "iterate" in opts or "Format" in opts:
        raise ctx.fail("sinfo: error: this option is not supported by Corral's sinfo; "
                       "use `corral nodes --json`")
    if "reservation" in opts:
        from corral.shims.scontrol_resv import sinfo_table

        sinfo_table(ctx, client, header="noheader" not in opts)
        return
    per_node = "Node" in opts
    fmt = last("format")
    if fmt is None:
        fmt = ctx.env.get("SINFO_FORMAT") or (
            SUMMARY if "summarize" in opts else REASONS if "list_reasons" in opts
            else (NODE_LONG if "long" in opts else NODE) if per_node
            else LONG if "long" in opts else DEFAULT)
    items = parse_format(fmt)
    parts = client.partitions()
    nodes = client.nodes()
    want_parts = set((last("partition") or "").split(",")) - {""}
    if want_parts:
        parts = [p for p in parts if p.get("name") in want_parts]
    if "nodes" in opts:
        from corral.core.parse.hostlist import expand

        wanted = set(expand(last("nodes") or ""))
        nodes = [n for n in nodes if n.get("name") in wanted]
        parts = [p for p in parts if set(p.get("nodes") or []) & wanted]
    if "states" in opts:
        want = {s.strip().lower() for s in (last("states") or "").split(",")}
        nodes = [n for n in nodes if _COMPACT.get(str(n.get("state")), "") in want
                 or _LONG.get(str(n.get("state")), "") in want]
    if "list_reasons" in opts:
        nodes = [n for n in nodes if n.get("reason")]
    if "responding" in opts:
        nodes = [n for n in nodes if n.get("connected") is not False]
    if "dead" in opts:
        nodes = [n for n in nodes if n.get("connected") is False]
    groups = _groups(parts, nodes, items, per_node)
    if "list_reasons" in opts or "states" in opts or "nodes" in opts or "dead" in opts:
        groups = [g for g in groups if g.nodes]
    if "long" in opts and "noheader" not in opts:
        ctx.print(time.strftime("%a %b %d %H:%M:%S %Y", time.localtime(ctx.now)))
    for line in render(items, groups, header="noheader" not in opts):
        ctx.print(line)
