"""Read a ``slurm.conf`` and translate it to ``corral.toml`` data, saying what did not map.

Syntax (read by ``slurmconf_read``): ``Key=Value`` pairs, comments, continuations,
quotes and ``include``. Here: ``NodeName=...``, ``PartitionName=...`` and ``NodeSet=...``
lines whose first pair names the object and whose other pairs describe it;
``NodeName=DEFAULT`` and ``PartitionName=DEFAULT`` lines give defaults for the lines
that follow.

Translation (``translate``): nodes (hostlist names kept, ``Boards x SocketsPerBoard`` or
``Sockets``, ``CoresPerSocket``, ``ThreadsPerCore``, ``CPUs``, ``RealMemory``,
``Gres=gpu:a100:4,...``, ``Features``, ``Weight``), partitions (``Nodes`` incl. NodeSets,
``MaxTime``, ``DefaultTime``, ``Default``, ``PriorityTier``, ``PriorityJobFactor``,
``PreemptMode``, ``State``, ``AllowAccounts``, ``AllowQos``, ``MaxNodes``, ``MinNodes``,
``OverSubscribe=EXCLUSIVE``, ``DefMemPerCPU``, ``MaxMemPerCPU``, ``GraceTime``), priority
(``PriorityType``, ``PriorityWeight*``, ``PriorityDecayHalfLife``, ``PriorityMaxAge``,
``PriorityFavorSmall``, ``PriorityFlags``), scheduling (``SchedulerType``,
``SchedulerParameters`` bf_window/bf_max_job_test/bf_resolution/bf_continue/
default_queue_depth/sched_max_job_start, ``SelectTypeParameters``), preemption (``PreemptType``,
``PreemptMode``), ``DefMemPerCPU``, ``MaxArraySize``, ``MinJobAge``, ``KillWait``,
``ClusterName``, the prolog/epilog programs (``Prolog``, ``Epilog``, ``TaskProlog``,
``TaskEpilog``, ``PrologSlurmctld``, ``EpilogSlurmctld``, ``PrologEpilogTimeout``,
``PrologFlags``, SchedulerParameters ``nohold_on_prolog_fail``: ``[scripts]``), the health
check (``HealthCheckProgram``, ``HealthCheckInterval``, ``HealthCheckNodeState``:
``[health_check]``). A ``cgroup.conf`` next to slurm.conf gives the ``[cgroup]`` memory
knobs (``ConstrainRAMSpace``, ``MinRAMSpace``, ``AllowedRAMSpace``, ``ConstrainSwapSpace``,
``AllowedSwapSpace``: ``translate_cgroup_conf``); an ``oci.conf`` gives ``[containers]
runtime`` (``corral.frontends.ociconf``). Every other line, key or sub-option is
reported in ``unmapped`` with its file, line and the reason, so nothing is silently dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral.core.parse.errors import ParseError
from corral.core.parse.gres import parse_gres
from corral.core.parse.hostlist import expand
from corral.core.parse.timefmt import parse_time_s
from corral.frontends.slurmconf_read import ConfLine, SlurmConfError, Unmapped, read_conf

__all__ = ["ConfLine", "ImportResult", "SlurmConfError", "Unmapped", "import_slurm_conf",
           "read_conf", "translate"]


@dataclass
class ImportResult:
    data: dict[str, Any]  # corral.toml content
    unmapped: list[Unmapped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# ---- translating -----------------------------------------------------------------------

#: Reasons for well-known keys that have no Corral equivalent (lower-case keys).
KNOWN_REASONS: dict[str, str] = {
    "slurmctldhost": "the controller address is where `corral up`/`corral controller` runs "
                     "(--listen / [controller] listen)",
    "controlmachine": "the controller address is where `corral controller` runs",
    "backupcontroller": "high availability uses PostgreSQL and several controllers",
    "slurmctldport": "set [controller] listen = \"host:port\"",
    "slurmdport": "agents connect out to the controller; no inbound port on nodes",
    "slurmuser": "the controller runs as the user who starts it",
    "slurmduser": "the agent runs as the user who starts it (root to run jobs as others)",
    "authtype": "local callers are identified by SO_PEERCRED, remote ones by signed tokens",
    "credtype": "agents authenticate with the cluster key",
    "authaltypes": "remote callers use signed tokens (`corral token`)",
    "statesavelocation": "state lives under state_dir (--state-dir / CORRAL_STATE_DIR)",
    "slurmdspooldir": "the agent's job spool lives under state_dir",
    "slurmctldpidfile": "not needed", "slurmdpidfile": "not needed",
    "slurmctldlogfile": "logs go to state_dir/logs", "slurmdlogfile": "logs go to state_dir/logs",
    "slurmctlddebug": "use [controller] log_level", "slurmddebug": "use [controller] log_level",
    "mpidefault": "srun starts tasks itself; MPI libraries launch through srun or mpirun",
    "switchtype": "no interconnect switch plugins",
    "returntoservice": "a node returns to service when its agent registers again",
    "maxjobcount": "no fixed job table size",
    "proctracktype": "the agent tracks jobs with cgroups (or process groups without them)",
    "taskplugin": "the agent binds CPUs and memory with cgroups/affinity automatically",
    "jobcomptype": "Corral keeps every finished job in its database (`corral history`)",
    "jobcomploc": "Corral keeps every finished job in its database",
    "jobacctgathertype": "the agent measures CPU time and memory of every job",
    "accountingstoragetype": "accounting is in Corral's own database",
    "accountingstoragehost": "accounting is in Corral's own database",
    "accountingstorageport": "accounting is in Corral's own database",
    "slurmdparameters": "listed [[nodes]] hardware always overrides discovery "
                        "(config_overrides is the default)",
    "selecttype": "Corral always allocates cores, memory and GPUs (like select/cons_tres)",
    "grestypes": "GRES types come from the nodes' Gres= lines",
    "messagetimeout": "not configurable", "tcptimeout": "not configurable",
    "schedulertimeslice": "no gang time slicing",
    "inactivelimit": "not applicable", "waittime": "not applicable",
    "srunprolog": "srun runs --prolog PROGRAM per step; no cluster-wide srun prolog",
    "srunepilog": "srun runs --epilog PROGRAM per step; no cluster-wide srun epilog",
}

_NODE_IGNORED = {
    "nodeaddr": "agents register their own address",
    "nodehostname": "agents register their own host name",
    "port": "agents connect out; no per-node port",
    "state": "a node's state comes from its agent (UNKNOWN until it registers)",
    "tmpdisk": "temporary disk is not a scheduled resource",
    "corespeccount": "core specialization is not supported",
    "cpuspeclist": "core specialization is not supported",
    "memspeclimit": "memory specialization is not supported",
    "reason": "set node reasons with `corral drain NODE --reason`",
    "cpubind": "the agent binds to allocated cores",
}

_PART_MAPPED = {
    "nodes", "maxtime", "defaulttime", "default", "prioritytier", "priorityjobfactor",
    "preemptmode", "state", "allowaccounts", "allowqos", "maxnodes", "minnodes",
    "oversubscribe", "defmempercpu", "maxmempercpu", "gracetime", "priority",
}


class _Ctx:
    def __init__(self) -> None:
        self.unmapped: list[Unmapped] = []
        self.notes: list[str] = []

    def skip(self, line: ConfLine, key: str, value: str, reason: str) -> None:
        self.unmapped.append(Unmapped(line.where, key, value, reason))


def _time(value: str) -> int | None:
    """Seconds of a Slurm time value; ``None`` for INFINITE/UNLIMITED."""
    return parse_time_s(value)


def _yes(value: str) -> bool:
    return value.strip().upper() in ("YES", "Y", "TRUE", "1")


def _int_value(value: str, line: ConfLine, key: str) -> int:
    v = value.strip()
    if not v.lstrip("-").isdigit():
        raise SlurmConfError(f"{key}={value}: not a whole number", line.where)
    return int(v)


def _node_entry(line: ConfLine, params: dict[str, tuple[str, str]], c: _Ctx) -> dict[str, Any]:
    """One [[nodes]] table from merged NodeName parameters (lower-case key -> (key, value))."""
    entry: dict[str, Any] = {"name": params["nodename"][1]}

    def get(k: str) -> str | None:
        return params[k][1] if k in params else None

    def num(k: str) -> int | None:
        v = get(k)
        return None if v is None else _int_value(v, line, params[k][0])

    boards = num("boards") or 1
    sockets_per_board = num("socketsperboard")
    sockets = sockets_per_board * boards if sockets_per_board else num("sockets")
    cores = num("corespersocket")
    threads = num("threadspercore") or 1
    cpus = num("cpus") if "cpus" in params else num("procs")
    if cores is not None:
        entry["sockets"] = sockets or 1
        entry["cores_per_socket"] = cores
        entry["threads_per_core"] = threads
        total = entry["sockets"] * cores * threads
        if cpus is not None and cpus not in (total, total // threads):
            c.skip(line, "CPUs", str(cpus), f"differs from the topology ({total} CPUs); "
                   "the topology is used")
    elif cpus is not None:
        if sockets and sockets > 1 and cpus % sockets == 0:
            entry["sockets"] = sockets
            entry["cores_per_socket"] = cpus // sockets
            entry["threads_per_core"] = threads
        else:
            entry["cpus"] = cpus
    elif sockets is not None:
        entry["sockets"] = sockets
        entry["cores_per_socket"] = 1
        entry["threads_per_core"] = threads
    else:
        entry["discover"] = True
        c.notes.append(f"{line.where}: node {entry['name']} gives no CPU count; "
                       "discover = true (Slurm would assume 1 CPU)")
    mem = get("realmemory")
    if mem is not None:
        entry["mem_mb"] = _int_value(mem, line, "RealMemory")
    else:
        entry["discover"] = True
        c.notes.append(f"{line.where}: node {entry['name']} gives no RealMemory; "
                       "discover = true (Slurm would assume 1 MB)")
    gres = get("gres")
    if gres:
        text = ",".join(part.split("(", 1)[0] for part in gres.split(","))
        try:
            reqs = parse_gres(text)
        except ParseError as exc:
            c.skip(line, params["gres"][0], gres, f"cannot parse: {exc.reason}")
            reqs = ()
        gpu_types = {r.type for r in reqs if r.name.lower() == "gpu"}
        if len(gpu_types) > 1:
            c.skip(line, params["gres"][0], gres, "several GPU types on one node; Corral "
                   "holds one gpu_type per node (the first is used)")
        other: dict[str, int] = {}
        for r in reqs:
            if r.name.lower() == "gpu":
                if "gpus" in entry and r.type != entry.get("gpu_type", "gpu"):
                    continue
                entry["gpus"] = entry.get("gpus", 0) + r.count
                entry["gpu_type"] = r.type or "gpu"
            else:
                other[r.key] = other.get(r.key, 0) + r.count
        if other:
            entry["gres"] = other
    feats = get("features") or get("feature") or get("availablefeatures")
    if feats:
        entry["features"] = [f for f in (x.strip() for x in feats.split(",")) if f]
    active = get("activefeatures")
    if active:
        c.skip(line, params["activefeatures"][0], active, "node features are static in Corral "
               "(AvailableFeatures are used)")
    weight = get("weight")
    if weight is not None:
        entry["weight"] = _int_value(weight, line, "Weight")
    state = get("state")
    if state is not None and state.upper() == "CLOUD":
        entry["cloud"] = True
        entry.pop("discover", None)
    handled = {"nodename", "boards", "socketsperboard", "sockets", "corespersocket",
               "threadspercore", "cpus", "procs", "realmemory", "gres", "features", "feature",
               "availablefeatures", "activefeatures", "weight"}
    if state is not None and state.upper() == "CLOUD":
        handled = handled | {"state"}
    for low, (key, value) in params.items():
        if low in handled:
            continue
        c.skip(line, key, value, _NODE_IGNORED.get(low, "no Corral equivalent for this "
                                                      "node parameter"))
    return entry


def _partition_entry(
    line: ConfLine, params: dict[str, tuple[str, str]], nodesets: dict[str, str], c: _Ctx
) -> dict[str, Any]:
    name = params["partitionname"][1]
    entry: dict[str, Any] = {"name": name}

    def get(k: str) -> str | None:
        return params[k][1] if k in params else None

    nodes = get("nodes")
    if nodes:
        parts = []
        for item in _split_hostlist_items(nodes):
            parts.append(nodesets.get(item, item))
        entry["nodes"] = ",".join(parts) if nodes.upper() != "ALL" else "ALL"
    for key, field_name in (("maxtime", "max_time_s"), ("defaulttime", "default_time_s")):
        v = get(key)
        if v is not None:
            try:
                secs = _time(v)
            except ParseError:
                c.skip(line, params[key][0], v, "not a Slurm time")
                continue
            if secs is not None:
                entry[field_name] = secs
    if get("default") is not None and _yes(get("default") or ""):
        entry["default"] = True
    for key, field_name in (("prioritytier", "priority_tier"),
                            ("priorityjobfactor", "priority_job_factor"),
                            ("minnodes", "min_nodes")):
        v = get(key)
        if v is not None:
            entry[field_name] = _int_value(v, line, params[key][0])
    prio = get("priority")  # old name of both PriorityTier and PriorityJobFactor
    if prio is not None:
        entry.setdefault("priority_tier", _int_value(prio, line, "Priority"))
        entry.setdefault("priority_job_factor", entry["priority_tier"])
    v = get("maxnodes")
    if v is not None and v.upper() not in ("UNLIMITED", "INFINITE"):
        entry["max_nodes"] = _int_value(v, line, "MaxNodes")
    mode = get("preemptmode")
    if mode is not None:
        modes = [m.strip().upper() for m in mode.split(",")]
        base = [m for m in modes if m in ("OFF", "CANCEL", "REQUEUE", "SUSPEND")]
        if base:
            entry["preempt_mode"] = base[0]
        for m in modes:
            if m not in ("OFF", "CANCEL", "REQUEUE", "SUSPEND"):
                c.skip(line, params["preemptmode"][0], m, "only OFF, CANCEL, REQUEUE and "
                       "SUSPEND exist in Corral (no GANG time slicing)")
    state = get("state")
    if state is not None:
        up = state.upper()
        if up in ("UP", "DOWN", "DRAIN", "INACTIVE"):
            entry["state"] = up
        else:
            c.skip(line, params["state"][0], state, "unknown partition state")
    for key, field_name in (("allowaccounts", "allow_accounts"), ("allowqos", "allow_qos")):
        v = get(key)
        if v is not None and v.upper() != "ALL":
            entry[field_name] = [x.strip() for x in v.split(",") if x.strip()]
    over = get("oversubscribe")
    if over is not None:
        o = over.split(":", 1)[0].upper()
        if o == "EXCLUSIVE":
            entry["exclusive"] = True
        elif o != "NO":
            c.skip(line, params["oversubscribe"][0], over, "Corral never oversubscribes "
                   "cores; jobs share nodes but not cores (OverSubscribe=NO)")
    for key, field_name in (("defmempercpu", "default_mem_per_cpu_mb"),
                            ("maxmempercpu", "max_mem_per_cpu_mb")):
        v = get(key)
        if v is not None:
            entry[field_name] = _int_value(v, line, params[key][0])
    grace = get("gracetime")
    if grace is not None:
        entry["grace_time_s"] = _int_value(grace, line, "GraceTime")
    for low, (key, value) in params.items():
        if low == "partitionname" or low in _PART_MAPPED:
            continue
        c.skip(line, key, value, "no Corral equivalent for this partition parameter")
    return entry


def _split_hostlist_items(text: str) -> list[str]:
    items: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    items.append("".join(cur))
    return [i.strip() for i in items if i.strip()]


def _scheduler_parameters(line: ConfLine, key: str, value: str, data: dict[str, Any],
                          c: _Ctx) -> None:
    sched = data.setdefault("scheduler", {})
    for item in (x.strip() for x in value.split(",")):
        if not item:
            continue
        name, eq, v = item.partition("=")
        low = name.lower()
        try:
            if low == "bf_window" and eq:
                sched["bf_window_s"] = int(v) * 60  # minutes in Slurm
            elif low == "bf_max_job_test" and eq:
                sched["bf_max_job_test"] = int(v)
            elif low == "bf_resolution" and eq:
                sched["bf_resolution_s"] = int(v)
            elif low == "bf_continue":
                sched["bf_continue"] = True
            elif low == "nohold_on_prolog_fail":
                data.setdefault("scripts", {}).setdefault("flags", []).append("nohold")
            elif low == "default_queue_depth" and eq:
                sched["max_jobs_per_cycle"] = int(v)
            elif low == "sched_max_job_start" and eq:
                if int(v) < 0:
                    raise ValueError(v)
                if int(v):  # 0: Slurm's default, no limit
                    sched["max_starts_per_cycle"] = int(v)
            elif low == "max_array_tasks" and eq:
                c.skip(line, f"{key}:{name}", v, "no Corral equivalent")
            elif low in ("bf_interval", "sched_interval", "sched_min_interval",
                         "batch_sched_delay", "defer", "bf_yield_interval", "max_rpc_cnt",
                         "bf_yield_sleep"):
                c.skip(line, f"{key}:{name}", v or "set", "Corral schedules on events "
                       "(submit, end, node change) with a short coalescing delay: "
                       "[controller] schedule_delay_ms")
            else:
                c.skip(line, f"{key}:{name}", v or "set", "no Corral equivalent")
        except ValueError:
            c.skip(line, f"{key}:{name}", v, "not a whole number")


def translate(lines: list[ConfLine]) -> ImportResult:
    """``corral.toml`` data from parsed ``slurm.conf`` lines."""
    c = _Ctx()
    data: dict[str, Any] = {}
    nodes: list[dict[str, Any]] = []
    partitions: list[dict[str, Any]] = []
    node_defaults: dict[str, tuple[str, str]] = {}
    part_defaults: dict[str, tuple[str, str]] = {}
    nodesets: dict[str, str] = {}
    switches: list[dict[str, Any]] = []
    sched = data.setdefault("scheduler", {})
    weights: dict[str, Any] = {}
    preempt: dict[str, Any] = {}
    controller: dict[str, Any] = {}

    for line in lines:
        if not line.pairs:
            continue
        head_key, head_value = line.pairs[0]
        head = head_key.lower()
        params = {k.lower(): (k, v) for k, v in line.pairs}
        if head == "nodename":
            if head_value.upper() == "DEFAULT":
                node_defaults.update({k: kv for k, kv in params.items() if k != "nodename"})
                continue
            merged = {**node_defaults, **params}
            try:
                expand(head_value)
            except ParseError as exc:
                raise SlurmConfError(f"NodeName={head_value}: {exc.reason}", line.where) \
                    from None
            nodes.append(_node_entry(line, merged, c))
            continue
        if head == "partitionname":
            if head_value.upper() == "DEFAULT":
                part_defaults.update({k: kv for k, kv in params.items()
                                      if k != "partitionname"})
                continue
            partitions.append(_partition_entry(line, {**part_defaults, **params}, nodesets, c))
            continue
        if head == "nodeset":
            ns_nodes = params.get("nodes")
            if ns_nodes:
                nodesets[head_value] = ns_nodes[1]
            else:
                c.skip(line, head_key, head_value, "NodeSets defined by Feature= are not "
                       "supported; list the nodes instead")
            continue
        if head == "switchname":  # topology.conf
            entry: dict[str, Any] = {"name": head_value}
            for k, v in line.pairs[1:]:
                if k.lower() in ("switches", "nodes"):
                    entry[k.lower()] = v
                elif k.lower() not in ("linkspeed",):
                    c.skip(line, k, v, "no Corral equivalent")
            switches.append(entry)
            continue
        if head in ("downnodes", "frontendname"):
            c.skip(line, head_key, head_value, "no Corral equivalent")
            continue
        for key, value in line.pairs:
            _global(line, key, value, data, sched, weights, preempt, controller, c)

    if nodes:
        data["nodes"] = nodes
    if switches:
        data["switches"] = switches
    if partitions:
        data["partitions"] = partitions
        for part in partitions:
            if "default_time_s" not in part:
                limit = "no limit" if "max_time_s" not in part else "its MaxTime"
                c.notes.append(
                    f"partition {part['name']}: no DefaultTime; Slurm gives jobs without "
                    f"--time {limit}, Corral gives them scheduler.default_time_s"
                    f" ({sched.get('default_time_s', 3600)} s) unless default_time_s is set")
    if weights:
        data["weights"] = weights
    if preempt:
        data["preemption"] = preempt
    if controller:
        data["controller"] = controller
    if not sched:
        data.pop("scheduler", None)
    return ImportResult(data, c.unmapped, c.notes)


def _global(line: ConfLine, key: str, value: str, data: dict[str, Any], sched: dict[str, Any],
            weights: dict[str, Any], preempt: dict[str, Any], controller: dict[str, Any],
            c: _Ctx) -> None:
    low = key.lower()
    try:
        if low == "clustername":
            data["cluster_name"] = value
        elif low == "schedulertype":
            v = value.lower()
            if v.endswith("backfill"):
                sched["backfill"] = "easy"
            elif v.endswith("builtin"):
                sched["backfill"] = "none"
            else:
                c.skip(line, key, value, "unknown scheduler plugin")
        elif low == "topologyplugin":
            if value.lower().endswith("tree"):
                sched["placement"] = "topology"
            elif not value.lower().endswith("default"):
                c.skip(line, key, value, "only topology/tree (switch trees) is supported")
        elif low == "schedulerparameters":
            _scheduler_parameters(line, key, value, data, c)
        elif low == "selecttypeparameters":
            for p in (x.strip() for x in value.split(",")):
                up = p.upper()
                if up in ("CR_CORE_MEMORY", "CR_CPU_MEMORY", "CR_SOCKET_MEMORY"):
                    continue  # what Corral does: cores (or CPUs) and memory
                if up == "CR_LLN":
                    sched["placement"] = "spread"
                elif up == "CR_PACK_NODES":
                    sched["placement"] = "pack"
                elif up in ("CR_CORE", "CR_CPU", "CR_SOCKET"):
                    c.skip(line, key, p, "Corral always tracks memory as a consumable "
                           "resource (as CR_Core_Memory); set default_mem_per_cpu_mb or "
                           "node mem_mb so jobs without --mem still fit")
                else:
                    c.skip(line, key, p, "no Corral equivalent")
        elif low == "prioritytype":
            v = value.lower()
            if v.endswith("multifactor"):
                sched["ordering"] = "multifactor"
            elif v.endswith("basic"):
                sched["ordering"] = "fcfs"
            else:
                c.skip(line, key, value, "unknown priority plugin")
        elif low.startswith("priorityweight"):
            name = low.removeprefix("priorityweight")
            target = {"age": "age", "fairshare": "fairshare", "jobsize": "job_size",
                      "partition": "partition", "qos": "qos", "assoc": "assoc"}.get(name)
            if target is None:
                c.skip(line, key, value, "only Age, Fairshare, JobSize, Partition, QOS and "
                       "Assoc weights exist in Corral")
            else:
                weights[target] = int(value)
        elif low == "prioritydecayhalflife":
            secs = _time(value)
            if secs is not None:
                sched["decay_half_life_s"] = secs
        elif low == "prioritymaxage":
            secs = _time(value)
            if secs is not None:
                weights["max_age_s"] = secs
        elif low == "priorityfavorsmall":
            weights["favor_small"] = _yes(value)
        elif low == "priorityflags":
            for f in (x.strip().upper() for x in value.split(",")):
                if f == "SMALL_RELATIVE_TO_TIME":
                    weights["size_relative"] = True
                elif f == "NO_FAIR_TREE":
                    sched["fairshare"] = "classic"
                elif f == "FAIR_TREE":
                    sched["fairshare"] = "fair_tree"
                elif f:
                    c.skip(line, key, f, "no Corral equivalent")
        elif low == "preempttype":
            v = value.lower()
            if v.endswith("partition_prio"):
                preempt["type"] = "partition_prio"
            elif v.endswith("qos"):
                preempt["type"] = "qos"
            elif v.endswith("none"):
                preempt["type"] = "none"
            else:
                c.skip(line, key, value, "unknown preemption plugin")
        elif low == "preemptmode":
            for m in (x.strip().upper() for x in value.split(",")):
                if m in ("OFF", "CANCEL", "REQUEUE", "SUSPEND"):
                    if m == "OFF":
                        preempt.setdefault("type", "none")
                    else:
                        preempt["mode"] = m
                    if m == "SUSPEND":
                        preempt["allow_suspend"] = True
                else:
                    c.skip(line, key, m, "no GANG time slicing in Corral")
        elif low == "defmempercpu":
            sched["default_mem_per_cpu_mb"] = int(value)
        elif low == "maxarraysize":
            sched["max_array_size"] = int(value)
        elif low == "minjobage":
            controller["min_job_age_s"] = int(value)
        elif low == "firstjobid":
            controller["first_job_id"] = int(value)
        elif low == "killwait":
            controller["kill_grace_s"] = int(value)
        elif low == "licenses":  # Licenses=matlab:4,fluent*2,stata (a bare name: 1)
            pools = data.setdefault("licenses", [])
            for item in (x.strip() for x in value.split(",") if x.strip()):
                name, sep, count = item.replace("*", ":").partition(":")
                pools.append({"name": name.strip(), "count": int(count) if sep else 1})
        elif low in _SCRIPT_KEYS:
            if "," in value or "*" in value or "?" in value:
                c.skip(line, key, value, "one program per kind in Corral (no lists or "
                       "globs); name one program that runs the others")
            else:
                data.setdefault("scripts", {})[_SCRIPT_KEYS[low]] = value
        elif low in _POWER_KEYS:
            power = data.setdefault("power", {})
            target, kind = _POWER_KEYS[low]
            if kind == "s":
                power[target] = value
            elif kind == "list":
                power[target] = [x.strip() for x in value.split(",") if x.strip()]
            elif kind == "int":  # nodes per minute; 0: no limit
                if int(value) < 0:
                    raise ValueError(value)
                power[target] = int(value)
            elif kind == "time":
                if value.strip() in ("-1", "NONE", "INFINITE"):
                    power.pop(target, None)
                else:
                    power[target] = int(value)
        elif low == "maildomain":
            data.setdefault("scripts", {})["mail_domain"] = value
        elif low == "prologepilogtimeout":
            data.setdefault("scripts", {})["timeout_s"] = int(value)
        elif low == "prologflags":
            flags = data.setdefault("scripts", {}).setdefault("flags", [])
            for f in (x.strip() for x in value.split(",") if x.strip()):
                if f.lower() in ("alloc", "contain"):
                    flags.append(f.lower())
                else:
                    c.skip(line, key, f, "only Alloc and Contain (what Corral always "
                           "does) are understood")
        elif low == "healthcheckprogram":
            data.setdefault("health_check", {})["program"] = value
        elif low == "healthcheckinterval":
            data.setdefault("health_check", {})["interval_s"] = int(value)
        elif low == "healthchecknodestate":
            states = [x.strip().lower() for x in value.split(",") if x.strip()]
            from corral.config.lifecycle import HEALTH_NODE_STATES

            bad = [x for x in states if x not in HEALTH_NODE_STATES]
            if bad:
                c.skip(line, key, ",".join(bad), "unknown node state for health checks")
            good = [x for x in states if x in HEALTH_NODE_STATES]
            if good:
                data.setdefault("health_check", {})["node_state"] = good
        elif low == "slurmctldparameters":  # the rl_* rate limit -> [rate_limit]
            rl = data.setdefault("rate_limit", {})
            for item in (x.strip() for x in value.split(",") if x.strip()):
                name, _, v = item.partition("=")
                name = name.strip().lower()
                if name == "rl_enable":
                    rl["enabled"] = True
                elif name in _RL_KEYS:
                    rl[_RL_KEYS[name]] = int(v)
                else:
                    c.skip(line, key, item, "no Corral equivalent")
            if not rl:
                data.pop("rate_limit")
        elif low == "defmempernode":
            c.skip(line, key, value, "use default_mem_per_cpu_mb (memory per CPU)")
        else:
            c.skip(line, key, value, KNOWN_REASONS.get(low, "no Corral equivalent"))
    except (ValueError, ParseError):
        c.skip(line, key, value, "value not understood")


#: slurm.conf power-saving keys -> (``[power]`` key, kind).
_POWER_KEYS = {"suspendprogram": ("suspend_program", "s"),
               "resumeprogram": ("resume_program", "s"),
               "suspendtime": ("suspend_time_s", "time"),
               "suspendtimeout": ("suspend_timeout_s", "time"),
               "resumetimeout": ("resume_timeout_s", "time"),
               "suspendexcnodes": ("suspend_exc_nodes", "s"),
               "suspendexcparts": ("suspend_exc_parts", "list"),
               "resumerate": ("resume_rate", "int"),
               "suspendrate": ("suspend_rate", "int")}


#: slurm.conf program keys -> ``[scripts]`` keys.
_SCRIPT_KEYS = {"prolog": "prolog", "epilog": "epilog", "taskprolog": "task_prolog",
                "taskepilog": "task_epilog", "prologslurmctld": "prolog_slurmctld",
                "epilogslurmctld": "epilog_slurmctld", "mailprog": "mail_prog"}


#: SlurmctldParameters rl_* items -> ``[rate_limit]`` keys (whole numbers in Slurm).
_RL_KEYS = {"rl_bucket_size": "bucket_size", "rl_refill_rate": "refill_rate",
            "rl_refill_period": "refill_period_s", "rl_table_size": "table_size"}


#: cgroup.conf keys -> (``[cgroup]`` key, kind).
_CGROUP_MAPPED = {
    "constrainramspace": ("constrain_ram_space", "bool"),
    "minramspace": ("min_ram_space_mb", "int"),
    "allowedramspace": ("allowed_ram_space", "percent"),
    "constrainswapspace": ("constrain_swap_space", "bool"),
    "allowedswapspace": ("allowed_swap_space", "percent"),
}
_CGROUP_REASONS = {
    "cgroupplugin": "the agent detects cgroup v1 or v2 itself",
    "cgroupmountpoint": "the agent finds the cgroup mounts itself ([agent] cgroup_root "
                        "names the subtree)",
    "cgroupautomount": "the agent uses the cgroup filesystems that are mounted",
    "cgroupreleaseagentdir": "not needed: the agent removes job cgroups itself",
    "ignoresystemd": "the agent manages cgroupfs directly, never through systemd",
    "ignoresystemdonfailure": "the agent manages cgroupfs directly, never through systemd",
    "enablecontrollers": "the agent enables the controllers it needs",
    "constraincores": "the agent confines jobs to their cores ([agent] pin_cpus)",
    "constraindevices": "GPU device confinement is not configurable here",
    "maxrampercent": "no node-wide cap on a job's memory limit",
    "maxswappercent": "no node-wide cap on a job's swap limit",
    "memoryswappiness": "not supported",
    "constrainkmemspace": "kernel memory limits are not supported",
    "allowedkmemspace": "kernel memory limits are not supported",
    "maxkmempercent": "kernel memory limits are not supported",
    "minkmemspace": "kernel memory limits are not supported",
}


def _cgroup_value(kind: str, value: str) -> bool | int | float:
    v = value.strip()
    if kind == "bool":
        if v.upper() not in ("YES", "Y", "NO", "N", "TRUE", "FALSE", "1", "0"):
            raise ValueError(v)
        return _yes(v)
    if kind == "int":
        n = int(v)
        if n < 0:
            raise ValueError(v)
        return n
    pct = float(v.rstrip("%"))
    if not 0 <= pct < 1e6:
        raise ValueError(v)
    return pct


def translate_cgroup_conf(lines: list[ConfLine], result: ImportResult) -> None:
    """Add a ``cgroup.conf``'s memory knobs to ``result`` (``[cgroup]``), every other key
    to its ``unmapped``."""
    out: dict[str, Any] = {}
    for line in lines:
        for key, value in line.pairs:
            low = key.lower()
            hit = _CGROUP_MAPPED.get(low)
            if hit is None:
                result.unmapped.append(Unmapped(line.where, key, value, _CGROUP_REASONS.get(
                    low, "no Corral equivalent")))
                continue
            try:
                out[hit[0]] = _cgroup_value(hit[1], value)
            except ValueError:
                result.unmapped.append(Unmapped(line.where, key, value, "value not understood"))
    if lines and not any(k.lower() == "constrainramspace" for ln in lines for k, _v in ln.pairs):
        result.notes.append(
            f"{lines[0].file}: no ConstrainRAMSpace; Slurm's default is no (memory not "
            "enforced), Corral's [cgroup] constrain_ram_space defaults to true")
    if out:
        result.data["cgroup"] = out


def import_slurm_conf(path: str, read_text: Callable[[str], str] | None = None,
                      topology: str | None = None) -> ImportResult:
    """Read and translate ``path``; the result's ``data`` is ready for ``corral.toml``.

    The switch tree comes from ``topology`` (a topology.conf) or, when slurm.conf sets
    ``TopologyPlugin=topology/tree``, from the ``topology.conf`` next to it, as Slurm does.
    The ``cgroup.conf`` next to ``path``, if there is one, gives ``[cgroup]``; the
    ``oci.conf`` there gives ``[containers] runtime``.
    """
    import os

    lines = read_conf(path, read_text)
    if topology is None and any(
            k.lower() == "topologyplugin" and v.lower().endswith("tree")
            for ln in lines for k, v in ln.pairs):
        topology = os.path.join(os.path.dirname(path), "topology.conf")
    if topology is not None:
        lines = lines + read_conf(topology, read_text)
    result = translate(lines)
    cgroup_conf = os.path.join(os.path.dirname(path), "cgroup.conf")
    if read_text is not None or os.path.exists(cgroup_conf):
        try:
            cg_lines = read_conf(cgroup_conf, read_text)
        except SlurmConfError:
            if read_text is None:
                raise
        else:
            translate_cgroup_conf(cg_lines, result)
    oci_conf = os.path.join(os.path.dirname(path), "oci.conf")
    if read_text is not None or os.path.exists(oci_conf):
        try:
            oci_lines = read_conf(oci_conf, read_text)
        except SlurmConfError:
            if read_text is None:
                raise
        else:
            from corral.frontends.ociconf import translate_oci_conf

            translate_oci_conf(oci_lines, result.data, result.unmapped, result.notes)
    return result
