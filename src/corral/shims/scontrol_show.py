"""``scontrol show job|node|partition|config``: Slurm 22.05's key=value blocks.

A block is a head line, indented ``   key=value ...`` lines, and a line of three spaces;
blocks are separated by an empty line (``-o``/``--oneliner``: one line per record, every
field separated by a space, a space after the last). Missing values print as Slurm does:
``(null)``, ``Unknown``, ``N/A``, ``None``.
"""

from __future__ import annotations

import os
from typing import Any

from corral.core.parse.timefmt import format_time_s
from corral.shims import slurmfmt as sf

Record = dict[str, Any]


def block(lines: list[str], oneliner: bool) -> str:
    """One record's text, without the separating empty line."""
    if oneliner:
        return " ".join(lines) + " \n"
    return lines[0] + "\n" + "".join(f"   {ln}\n" for ln in lines[1:]) + "   \n"


def _null(v: Any) -> str:
    return "(null)" if v is None or v == "" else str(v)


def _time_min(rec: Record) -> str:
    v = rec.get("time_min_s")
    return "N/A" if not v else format_time_s(int(v))


def _default_out(rec: Record) -> str:
    wd = str(rec.get("workdir") or "/")
    if sf.is_array(rec):
        return os.path.join(wd, f"slurm-{sf.array_job_id(rec)}_{rec['array_task_id']}.out")
    return os.path.join(wd, f"slurm-{rec['id']}.out")


def _priority(rec: Record) -> str:
    if rec.get("hold") not in (None, "NONE") and sf.is_pending(rec):
        return "0"
    p = float(rec.get("priority") or 0.0)
    return str(int(p)) if p >= 1 else str(int(p * 4294967295)) if p > 0 else "0"


def job_lines(rec: Record, now: float) -> list[str]:
    state = sf.job_state(rec)
    pending = state == "PENDING"
    started = bool(rec.get("start_time"))
    uid, gid = int(rec.get("uid") or 0), int(rec.get("gid") or 0)
    head = f"JobId={rec['id']}"
    if sf.is_array(rec):
        aj = sf.array_job_id(rec)
        task = str(rec["display"]).split("_", 1)[1].strip("[]") if rec.get("members") \
            else str(rec["array_task_id"])
        if rec.get("members"):
            head = f"JobId={aj}"
        head += f" ArrayJobId={aj} ArrayTaskId={task}"
        if rec.get("array_max_running") is not None:
            head += f" ArrayTaskThrottle={rec['array_max_running']}"
    head += f" JobName={rec.get('name') or ''}"
    limit = rec.get("time_limit_s")
    elig = rec.get("eligible_time")
    start = rec.get("start_time") or rec.get("est_start") or (
        rec.get("begin_time") if pending else None)
    end = rec.get("end_time")
    if not end and started and limit is not None and state in ("RUNNING", "SUSPENDED"):
        end = float(rec["start_time"]) + float(limit)
    mem, per_cpu = sf.mem_text(rec)
    mem_key = "MinMemoryCPU" if per_cpu else "MinMemoryNode"
    cpt = int(rec.get("cpus_per_task") or 1)
    lines = [
        head,
        f"UserId={sf.user_of(rec)}({uid}) GroupId={sf.group_name(gid)}({gid}) MCS_label=N/A",
        f"Priority={_priority(rec)} Nice={int(rec.get('nice') or 0)} "
        f"Account={_null(rec.get('account'))} QOS={_null(rec.get('qos'))}",
        f"JobState={sf.shown_state(rec)} Reason={sf.reason(rec)} "
        f"Dependency={_null(rec.get('dependency'))}",
        f"Requeue={1 if rec.get('requeue', True) else 0} Restarts={int(rec.get('restarts') or 0)}"
        f" BatchFlag={0 if rec.get('interactive') else 1} Reboot=0 "
        f"ExitCode={sf.exit_code_text(rec)}",
        f"RunTime={format_time_s(sf.elapsed_s(rec, now))} "
        f"TimeLimit={format_time_s(None if limit is None else int(limit))} "
        f"TimeMin={_time_min(rec)}",
        f"SubmitTime={sf.iso(rec.get('submit_time'))} EligibleTime={sf.iso(elig)}",
        f"AccrueTime={sf.iso(elig)}",
        f"StartTime={sf.iso(start)} EndTime={sf.iso(end)} Deadline=N/A",
        f"SuspendTime=None SecsPreSuspend=0 "
        f"LastSchedEval={sf.iso(rec.get('start_time') or rec.get('submit_time'))} "
        "Scheduler=Main",
        f"Partition={rec.get('partition') or ''} "
        f"AllocNode:Sid={rec.get('submit_host') or 'localhost'}:0",
        "ReqNodeList=(null) ExcNodeList=(null)",
        f"NodeList={sf.nodelist(rec)}",
    ]
    if started and not pending:
        lines.append(f"BatchHost={sf.batch_host(rec)}")
    lines += [
        f"NumNodes={int(rec.get('num_nodes') or 1)} NumCPUs={int(rec.get('num_cpus') or 1)} "
        f"NumTasks={int(rec.get('num_tasks') or 1)} CPUs/Task={cpt} ReqB:S:C:T=0:0:*:*",
        f"TRES={rec.get('tres') or ''}",
        "Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*",
        f"MinCPUsNode={cpt} {mem_key}={mem} MinTmpDiskNode=0",
        f"Features={_null(rec.get('constraint'))} DelayBoot=00:00:00",
        f"OverSubscribe={'NO' if rec.get('exclusive') else 'OK'} Contiguous=0 "
        "Licenses=(null) Network=(null)",
        f"Command={_null(rec.get('command'))}",
        f"WorkDir={rec.get('workdir') or ''}",
    ]
    if rec.get("comment"):
        lines.append(f"Comment={rec['comment']} ")
    out = str(rec.get("stdout") or _default_out(rec))
    err = str(rec.get("stderr") or out)
    lines += [f"StdErr={err}", "StdIn=/dev/null", f"StdOut={out}", "Power="]
    return lines


_NODE_STATE = {
    "IDLE": "IDLE", "MIXED": "MIXED", "ALLOCATED": "ALLOCATED", "DRAINING": "MIXED+DRAIN",
    "DRAINED": "IDLE+DRAIN", "DOWN": "DOWN", "UNKNOWN": "UNKNOWN", "FUTURE": "FUTURE",
}


def node_state_long(node: Record) -> str:
    state = str(node.get("state") or "UNKNOWN")
    text = _NODE_STATE.get(state, state)
    if state == "DRAINING" and int(node.get("alloc_cpus") or 0) >= int(node.get("cpus") or 1):
        text = "ALLOCATED+DRAIN"
    if node.get("cloud"):
        text += "+CLOUD"
    if node.get("power"):  # POWERED_DOWN, POWERING_UP, POWERING_DOWN
        return f"{text}+{node['power']}"
    if node.get("connected") is False and state not in ("DOWN", "FUTURE"):
        text += "*"
    return text


def _gres(node: Record) -> str:
    parts = []
    for t, n in sorted((node.get("gpu_types") or {}).items()):
        parts.append(f"gpu:{t}:{n}")
    if node.get("gpus") and not parts:
        parts.append(f"gpu:{node['gpus']}")
    for name, n in sorted((node.get("gres") or {}).items()):
        parts.append(f"{name}:{n}")
    return ",".join(parts) or "(null)"


def node_addr(node: Record) -> str:
    """Slurm's NodeAddr: the address the node's agent connected from, else its host
    name (an agent on the controller's Unix socket), else the node name."""
    return str(node.get("address") or node.get("hostname") or node["name"])


def node_lines(node: Record, now: float) -> list[str]:
    cpus = int(node.get("cpus") or 0)
    alloc = int(node.get("alloc_cpus") or 0)
    mem = int(node.get("mem_mb") or 0)
    amem = int(node.get("alloc_mem_mb") or 0)
    feats = ",".join(node.get("features") or []) or "(null)"
    load = node.get("cpu_load")
    uname = os.uname()
    gpus = int(node.get("gpus") or 0)
    cfg_tres = f"cpu={cpus},mem={mem}M,billing={cpus}" + (f",gres/gpu={gpus}" if gpus else "")
    alloc_tres = (f"cpu={alloc},mem={amem}M" if alloc else "") + (
        f",gres/gpu={node.get('alloc_gpus')}" if node.get("alloc_gpus") else "")
    lines = [
        f"NodeName={node['name']} Arch={node.get('arch') or uname.machine} "
        f"CoresPerSocket={int(node.get('cores_per_socket') or 1)} ",
        f"CPUAlloc={alloc} CPUEfctv={cpus} CPUTot={cpus} "
        f"CPULoad={'N/A' if load is None else f'{float(load):.2f}'}",
        f"AvailableFeatures={feats}",
        f"ActiveFeatures={feats}",
        f"Gres={_gres(node)}",
        f"NodeAddr={node_addr(node)} NodeHostName={node.get('hostname') or node['name']} "
        f"Version={node.get('agent_version') or '22.05.8'}",
        f"OS={uname.sysname} {uname.release} {uname.version} ",
        f"RealMemory={mem} AllocMem={amem} FreeMem={node.get('free_mem_mb', 'N/A')} "
        f"Sockets={int(node.get('sockets') or 1)} Boards=1",
        f"State={node_state_long(node)} ThreadsPerCore={int(node.get('threads_per_core') or 1)}"
        f" TmpDisk=0 Weight={int(node.get('weight') or 1)} Owner=N/A MCS_label=N/A",
        f"Partitions={','.join(node.get('partitions') or [])} ",
        f"BootTime={sf.iso(node.get('boot_time'), 'None')} "
        f"SlurmdStartTime={sf.iso(node.get('registered_time') or node.get('boot_time'), 'None')}",
        f"LastBusyTime={sf.iso(node.get('last_busy') or node.get('last_seen'), 'None')}",
        f"CfgTRES={cfg_tres}",
        f"AllocTRES={alloc_tres}",
        "CapWatts=n/a",
        "CurrentWatts=0 AveWatts=0",
        "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s",
    ]
    if node.get("reason"):
        lines.append(f"Reason={node['reason']}")
    return lines


def _limit(v: Any, unlimited: str = "UNLIMITED") -> str:
    return unlimited if v is None else str(v)


def partition_lines(part: Record, now: float) -> list[str]:
    max_t = part.get("max_time_s")
    def_t = part.get("default_time_s")
    cpus = int(part.get("total_cpus") or 0)
    nodes = int(part.get("total_nodes") or len(part.get("nodes") or []))
    mem = int(part.get("total_mem_mb") or 0)
    allow_acc = part.get("allow_accounts")
    allow_qos = part.get("allow_qos")
    return [
        f"PartitionName={part['name']}",
        f"AllowGroups=ALL AllowAccounts={','.join(allow_acc) if allow_acc else 'ALL'} "
        f"AllowQos={','.join(allow_qos) if allow_qos else 'ALL'}",
        f"AllocNodes=ALL Default={'YES' if part.get('default') else 'NO'} QoS=N/A",
        f"DefaultTime={'NONE' if def_t is None else format_time_s(int(def_t))} "
        "DisableRootJobs=NO ExclusiveUser=NO "
        f"GraceTime={int(part.get('grace_time_s') or 0)} Hidden=NO",
        f"MaxNodes={_limit(part.get('max_nodes'))} "
        f"MaxTime={'UNLIMITED' if max_t is None else format_time_s(int(max_t))} "
        f"MinNodes={int(part.get('min_nodes') or 0)} LLN=NO MaxCPUsPerNode=UNLIMITED",
        f"Nodes={part.get('nodelist') or ','.join(part.get('nodes') or [])}",
        f"PriorityJobFactor={int(part.get('priority_job_factor') or 1)} "
        f"PriorityTier={int(part.get('priority_tier') or 1)} RootOnly=NO ReqResv=NO "
        f"OverSubscribe={'EXCLUSIVE' if part.get('exclusive') else 'NO'}",
        f"OverTimeLimit=NONE PreemptMode={str(part.get('preempt_mode') or 'OFF').upper()}",
        f"State={part.get('state') or 'UP'} TotalCPUs={cpus} TotalNodes={nodes} "
        "SelectTypeParameters=NONE",
        "JobDefaults=(null)",
        "DefMemPerNode=UNLIMITED MaxMemPerNode=UNLIMITED",
        f"TRES=cpu={cpus},mem={mem}M,node={nodes},billing={cpus}",
    ]


def partition_block(part: Record, now: float, oneliner: bool) -> str:
    lines = partition_lines(part, now)
    if oneliner:
        return " ".join(lines) + "\n"
    return lines[0] + "\n" + "".join(f"   {ln}\n" for ln in lines[1:])


def node_block(node: Record, now: float, oneliner: bool) -> str:
    lines = node_lines(node, now)
    if oneliner:
        return " ".join(lines) + "\n"
    return lines[0] + "\n" + "".join(f"   {ln}\n" for ln in lines[1:])


def config_lines(cfg: Record, ping: Record, now: float) -> list[str]:
    """``scontrol show config``: the Slurm keys clients read, from the running config."""
    sched = cfg.get("scheduler") or {}
    cluster = str(cfg.get("cluster_name") or cfg.get("name") or ping.get("cluster") or "corral")
    ctl = cfg.get("controller") or {}
    min_job_age = int(float(ctl.get("min_job_age_s") or 300))
    kill_wait = int(float(ctl.get("kill_grace_s") or 30))
    first_job_id = int(ctl.get("first_job_id") or 1)
    max_array = int(sched.get("max_array_size") or cfg.get("max_array_size") or 4001)
    pairs = [
        ("AccountingStorageType", "accounting_storage/corral"),
        ("AuthType", "auth/corral"),
        ("BOOT_TIME", sf.iso(ping.get("boot_time") or ping.get("started"))),
        ("ClusterName", cluster),
        ("DefMemPerCPU", str(sched.get("def_mem_per_cpu_mb", "UNLIMITED"))),
        ("EnforcePartLimits", "NO"),
        ("FirstJobId", str(first_job_id)),
        ("JobCompType", "jobcomp/none"),
        ("JobRequeue", "1"),
        ("KillWait", f"{kill_wait} sec"),
        ("MaxArraySize", str(max_array)),
        ("MaxJobCount", "100000"),
        ("MinJobAge", f"{min_job_age} sec"),
        ("MpiDefault", "none"),
        ("OverTimeLimit", "0 min"),
        ("PreemptMode", "OFF"),
        ("PriorityType", "priority/multifactor"),
        ("ProctrackType", "proctrack/corral"),
        ("SchedulerType", "sched/backfill"),
        ("SelectType", "select/cons_tres"),
        ("SelectTypeParameters", "CR_CORE_MEMORY"),
        ("SlurmctldHost[0]", ping.get("host") or "localhost"),
        ("SLURM_VERSION", "22.05.8"),
        ("TaskPlugin", "task/corral"),
        ("TmpFS", "/tmp"),
    ]
    lines = [f"Configuration data as of {sf.iso(now)}"]
    lines += [f"{k:<23} = {v}" for k, v in pairs]
    lines += ["", f"Slurmctld(primary) at {ping.get('host') or 'localhost'} is UP"]
    return lines
