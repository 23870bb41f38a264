"""Can this job *ever* run as asked? ``validate`` (at submit) and ``plan`` (every cycle).

"Cannot run now" and "can never run" are different verdicts. This module decides the
second: a request that no partition could satisfy even on an empty cluster with every node
up gets a ``Reject`` with a Slurm-style reason and one sentence the user can act on:

* unknown partition, account or QOS; account/QOS not allowed in the partition;
* malformed or contradictory shape (e.g. memory per node *and* per CPU, bad counts);
* time limit above the partition's ``MaxTime``; more nodes than the partition's
  ``MaxNodes`` or than it has;
* a constraint no node of the partition satisfies, or that does not parse; named nodes
  (``-w``) that do not exist or are not in the partition;
* unknown licenses or more than exist;
* more CPUs, memory or GPUs per node than any node of the partition has, or a node count
  the partition's nodes of that size cannot reach.

At submit (``validate``) three more rules apply: the partition must accept new jobs (not
DRAIN or INACTIVE), and the QOS's per-job limits are enforced as denials (Slurm's
``DenyOnLimit``); in the cycle those are pending reasons instead, since admins may change
them. A job listing several partitions is rejected only when none of them can take it;
``plan`` returns the ones that can, highest ``PriorityTier`` first, then in listed order.

Results are memoized per spec on the node table (a bounded memo; results never depend on it).
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.core import reasons as R
from corral.core.config import PlacementMode, SchedulerConfig
from corral.core.decisions import Reject
from corral.core.limits import Tres, per_job, qos_name
from corral.core.model.job import Job, JobSpec
from corral.core.model.partition import Partition, PartitionState
from corral.core.nodes import NodeTable, iter_bits, node_table
from corral.core.parse.constraint import ConstraintError
from corral.core.placement import Placer
from corral.core.placement.numa import domains_of
from corral.core.placement.numa import width as numa_width
from corral.core.placement.select import demand
from corral.core.pool import Pool
from corral.core.shape import NUMA_SINGLE, Shape, ShapeError, TaskSet, shape_of, time_limit_s
from corral.core.snapshot import ClusterSnapshot


@dataclass(frozen=True, slots=True)
class Option:
    partition: Partition
    shape: Shape
    time_limit_s: int


@dataclass(frozen=True, slots=True)
class Plan:
    """Where a job may ever run (``options`` in try order), or why it never can."""

    options: tuple[Option, ...]
    reason: str = ""
    message: str = ""


def fmt_time(seconds: int | float) -> str:
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"


def _empty_pool(table: NodeTable) -> Pool:
    got = table.memo.get("empty_pool")
    if not isinstance(got, Pool):
        got = Pool(table, table.all_mask)
        table.memo["empty_pool"] = got
    return got


def _placer(table: NodeTable, config: SchedulerConfig) -> Placer:
    key = f"placer:{config.placement.value}"
    got = table.memo.get(key)
    if not isinstance(got, Placer):
        got = Placer(table, config.placement)
        table.memo[key] = got
    return got


def _order(parts: list[Partition]) -> list[Partition]:
    return sorted(parts, key=lambda p: -p.priority_tier)


def plan(spec: JobSpec, job_time_limit: int | None, snapshot: ClusterSnapshot,
         table: NodeTable, config: SchedulerConfig, submit: bool = False) -> Plan:
    """Partitions where ``spec`` could ever run, or the reason it never can."""
    if spec.partitions:
        parts: list[Partition] = []
        for name in spec.partitions:
            p = table.partitions.get(name)
            if p is None:
                return Plan((), R.INVALID_PARTITION, f"partition {name!r} does not exist")
            parts.append(p)
    else:
        d = snapshot.default_partition()
        if d is None:
            return Plan((), R.INVALID_PARTITION, "no partition given and no default partition")
        parts = [table.partitions.get(d.name, d)]
    qos_map = {q.name: q for q in snapshot.qos}
    if spec.qos and snapshot.qos and spec.qos not in qos_map:
        return Plan((), R.INVALID_QOS, f"QOS {spec.qos!r} does not exist")
    acct_problem = _account_problem(spec, snapshot)
    if acct_problem:
        return Plan((), R.INVALID_ACCOUNT, acct_problem)
    lic_problem = _license_problem(spec, snapshot)
    if lic_problem:
        return Plan((), R.BAD_LICENSES, lic_problem)
    options: list[Option] = []
    first: tuple[str, str] | None = None
    dummy = Job(0, spec, 0.0, time_limit_s=job_time_limit)
    qn = qos_name(dummy, qos_map)
    for p in _order(parts):
        problem = _partition_problem(spec, dummy, p, qn, table, config, submit)
        if isinstance(problem, Option):
            options.append(problem)
        elif first is None:
            first = problem
    if options:
        return Plan(tuple(options))
    assert first is not None
    return Plan((), first[0], first[1])


def _account_problem(spec: JobSpec, snapshot: ClusterSnapshot) -> str | None:
    tree = snapshot.accounts
    if not spec.account or not tree.accounts:
        return None
    if tree.account(spec.account) is None:
        return f"account {spec.account!r} does not exist"
    assoc = tree.users_of(spec.account)
    if assoc and all(a.user != spec.user for a in assoc):
        return f"user {spec.user} is not a member of account {spec.account!r}"
    return None


def _license_problem(spec: JobSpec, snapshot: ClusterSnapshot) -> str | None:
    total = dict(snapshot.licenses)
    for name, n in spec.licenses:
        if name not in total:
            return f"license {name!r} does not exist"
        if n > total[name]:
            return f"requests {n} {name} licenses but only {total[name]} exist"
    return None


def _partition_problem(spec: JobSpec, job: Job, p: Partition, qn: str | None, table: NodeTable,
                       config: SchedulerConfig, submit: bool) -> Option | tuple[str, str]:
    if submit and p.state in (PartitionState.DRAIN, PartitionState.INACTIVE):
        return R.PARTITION_CONFIG, f"partition {p.name} is {p.state.value} and accepts no new jobs"
    account = spec.account
    if p.allow_accounts is not None and (account or "") not in p.allow_accounts:
        return R.PARTITION_CONFIG, f"account {account!r} may not use partition {p.name}"
    if p.allow_qos is not None and (qn or "") not in p.allow_qos:
        return R.PARTITION_CONFIG, f"QOS {qn!r} may not use partition {p.name}"
    try:
        shape = shape_of(spec, p, config)
    except ShapeError as exc:
        return exc.reason, exc.message
    tl = time_limit_s(job, p, config)
    if tl <= 0:
        return R.PARTITION_TIME_LIMIT, f"time limit must be positive (got {tl}s)"
    if p.max_time_s is not None and tl > p.max_time_s:
        return (R.PARTITION_TIME_LIMIT,
                f"time limit {fmt_time(tl)} exceeds partition {p.name}'s maximum of "
                f"{fmt_time(p.max_time_s)}")
    pmask = table.part_masks.get(p.name, 0)
    pcount = pmask.bit_count()
    if pcount == 0:  # no node has registered yet (or an elastic partition is empty)
        return (R.REQ_NODE_NOT_AVAIL,
                f"partition {p.name} has no nodes yet: the job waits for them")
    if p.max_nodes is not None and shape.nodes_min > p.max_nodes:
        return (R.PARTITION_NODE_LIMIT,
                f"requests {shape.nodes_min} nodes but partition {p.name} allows at most "
                f"{p.max_nodes} per job")
    if not shape.grouped and shape.single.nodes_max < p.min_nodes:
        return (R.PARTITION_NODE_LIMIT,
                f"requests at most {shape.single.nodes_max} nodes but partition {p.name} "
                f"needs at least {p.min_nodes}")
    if shape.nodes_min > pcount:
        return (R.PARTITION_NODE_LIMIT,
                f"requests {shape.nodes_min} nodes but partition {p.name} has {pcount}")
    try:
        fmask = table.feature_mask(shape.constraint)
        for ts in shape.sets:
            if ts.constraint:
                table.feature_mask(ts.constraint)
    except (ConstraintError, ValueError) as exc:
        return R.BAD_CONSTRAINTS, str(exc)
    if not fmask & pmask:
        return (R.BAD_CONSTRAINTS,
                f"no node of partition {p.name} has the features {shape.constraint!r}")
    for names, label in ((shape.nodelist, "requested"), (shape.exclude, "excluded")):
        m, unknown = table.names_mask(names)
        if unknown:
            return R.NODE_CONFIG, f"{label} node {unknown[0]!r} does not exist"
        if label == "requested" and m & ~pmask:
            bad = table.names[iter_bits(m & ~pmask)[0]]
            return R.NODE_CONFIG, f"requested node {bad} is not in partition {p.name}"
    if shape.nodelist and not shape.grouped:
        if table.names_mask(shape.nodelist)[0].bit_count() > shape.single.nodes_max:
            return (R.NODE_CONFIG,
                    f"names {len(shape.nodelist)} nodes but asks for at most "
                    f"{shape.single.nodes_max}")
    if not _fits_empty(shape, p.name, table, config):
        return R.RESOURCES_NEVER, explain(shape, p, table)
    return Option(p, shape, tl)


def _fits_empty(shape: Shape, partition: str, table: NodeTable, config: SchedulerConfig) -> bool:
    """Does ``shape`` fit the partition with every node up and idle (memoized by value)?"""
    memo = table.memo.setdefault(f"empty_fit:{config.placement.value}", {})
    assert isinstance(memo, dict)
    key = (shape, partition)
    got = memo.get(key)
    if got is None:
        got = _placer(table, config).fits(shape, partition, _empty_pool(table)) is not None
        if len(memo) > 100_000:
            memo.clear()
        memo[key] = got
    return bool(got)


def explain(shape: Shape, p: Partition, table: NodeTable) -> str:
    """One sentence on why ``shape`` cannot fit the partition even when it is empty."""
    pmask = table.part_masks.get(p.name, 0) & table.feature_mask(shape.constraint)
    empty = _empty_pool(table)
    placer = Placer(table, PlacementMode.PACK)
    for ts in shape.sets:
        if shape.grouped and len(shape.sets) > 1:
            alone = Shape((ts,), shape.exclusive, shape.constraint, (), shape.exclude, None, 0,
                          ts.min_tasks, False, ts.cpus_per_task, 0, 1, True)
            if placer.fits(alone, p.name, empty) is not None:
                continue
        mask = pmask & (table.feature_mask(ts.constraint) if ts.constraint else table.all_mask)
        what = f"task group {ts.name!r}" if ts.name else "the job"
        per = ts.hi if ts.fixed else 1
        if ts.gpu_type is not None and (ts.gpus_per_node or ts.gpus_per_task or ts.gpus_total):
            if not mask & table.gpu_type_nodes.get(ts.gpu_type, 0):
                return (f"{what} asks for {ts.gpu_type} GPUs but no node of partition "
                        f"{p.name} has any")
        best_c = best_m = best_g = 0
        for i in iter_bits(mask):
            d = demand(ts, table, table.class_of[i])
            best_c = max(best_c, table.cores[i] // d.cores_per_task)
            best_m = max(best_m, table.mem[i])
            g = (table.gpu_type_masks[i].get(ts.gpu_type, 0).bit_count() if ts.gpu_type
                 else table.ngpus[i])
            best_g = max(best_g, g)
        if ts.numa == NUMA_SINGLE:
            numa = _numa_problem(ts, mask, table, empty, what, p.name)
            if numa:
                return numa
        need_g = ts.gpus_per_node + per * ts.gpus_per_task
        if need_g > best_g:
            kind = f"{ts.gpu_type} " if ts.gpu_type else ""
            return (f"{what} asks for {need_g} {kind}GPUs per node but no node of partition "
                    f"{p.name} has more than {best_g}")
        if per * ts.cpus_per_task > 0 and best_c < per:
            return (f"{what} asks for {per * ts.cpus_per_task} CPUs per node but no node of "
                    f"partition {p.name} has that many")
        if ts.mem_per_node_mb and ts.mem_per_node_mb > best_m:
            return (f"{what} asks for {ts.mem_per_node_mb} MB of memory per node but no node "
                    f"of partition {p.name} has more than {best_m} MB")
        if ts.mem_per_task_mb and per * ts.mem_per_task_mb > best_m:
            return (f"{what} asks for {per * ts.mem_per_task_mb} MB of memory per node but no "
                    f"node of partition {p.name} has more than {best_m} MB")
        if ts.gpus_total and ts.gpus_total > sum(table.ngpus[i] for i in iter_bits(mask)):
            return (f"{what} asks for {ts.gpus_total} GPUs but partition {p.name} has "
                    f"{sum(table.ngpus[i] for i in iter_bits(mask))}")
        return (f"{what} asks for {_describe(ts)} and the nodes of partition {p.name} cannot "
                f"provide that even when idle")
    cores = sum(table.cores[i] for i in iter_bits(pmask))
    gpus = sum(table.ngpus[i] for i in iter_bits(pmask))
    need_c = sum(ts.min_tasks * ts.cpus_per_task for ts in shape.sets)
    need_g = sum(ts.min_tasks * ts.gpus_per_task for ts in shape.sets)
    return (f"the task groups fit one by one but not together: they need at least {need_c} "
            f"CPUs and {need_g} GPUs at once, and partition {p.name} has {cores} cores and "
            f"{gpus} GPUs")


def _numa_problem(ts: TaskSet, mask: int, table: NodeTable, empty: Pool, what: str,
                  partition: str) -> str:
    """Why no node of ``mask`` can hold one task of a single-numa-node set in one of its
    NUMA domains ("" when some node could)."""
    best_c = best_g = 0
    for i in iter_bits(mask):
        d = demand(ts, table, table.class_of[i])
        if numa_width(empty, i, d.cores_per_task, ts.gpus_per_task, ts.gpu_type) == 1:
            return ""
        doms = domains_of(empty, i)
        best_c = max(best_c, max(m.bit_count() for m in doms) * table.tpc[i])
        if ts.gpus_per_task:
            per = [0] * len(doms)
            loose = 0
            for pos, dom in enumerate(table.gpu_numa[i]):
                if ts.gpu_type is None or table.gpu_types[i][pos] == ts.gpu_type:
                    if 0 <= dom < len(doms):
                        per[dom] += 1
                    else:
                        loose += 1
            best_g = max(best_g, max(per, default=0) + loose)
    cpus = ts.cpus_per_task
    text = (f"{what} asks for {cpus} CPUs"
            + (f" and {ts.gpus_per_task} GPUs" if ts.gpus_per_task else "")
            + " per replica from one NUMA domain (topologyPolicy single-numa-node) but the "
            f"largest NUMA domain of partition {partition}'s nodes has {best_c} CPUs")
    if ts.gpus_per_task:
        text += f" and at most {best_g} GPUs"
    return text


def _describe(ts: TaskSet) -> str:
    parts = [f"{ts.tasks} tasks" if not ts.fixed else f"{ts.nodes_min} nodes x {ts.hi} tasks",
             f"{ts.cpus_per_task} CPUs per task"]
    if ts.gpus_per_task:
        parts.append(f"{ts.gpus_per_task} GPUs per task")
    if ts.gpus_per_node:
        parts.append(f"{ts.gpus_per_node} GPUs per node")
    if ts.mem_per_task_mb:
        parts.append(f"{ts.mem_per_task_mb} MB per task")
    if ts.mem_per_node_mb:
        parts.append(f"{ts.mem_per_node_mb} MB per node")
    return ", ".join(parts)


def validate(spec: JobSpec, snapshot: ClusterSnapshot, config: SchedulerConfig,
             job_id: int = 0) -> Reject | None:
    """Reject a submission that can never run as asked; ``None`` when it is acceptable.

    Used by the controller at submit time. Beyond ``plan``'s checks, the partition must
    accept new jobs and the QOS's per-job limits deny instead of holding.
    """
    table, _ = node_table(snapshot.nodes, snapshot.partitions)
    pl = plan(spec, None, snapshot, table, config, submit=True)
    if not pl.options:
        return Reject(job_id, pl.reason, pl.message)
    qos_map = {q.name: q for q in snapshot.qos}
    qn = qos_name(Job(job_id, spec, 0.0), qos_map)
    q = qos_map.get(qn) if qn else None
    if q is None:
        return None
    if q.limits.max_submit_per_user is not None:
        n = sum(1 for j in (*snapshot.pending, *snapshot.running)
                if j.spec.user == spec.user and qos_name(j, qos_map) == qn)
        if n >= q.limits.max_submit_per_user:
            return Reject(job_id, "QOSMaxSubmitJobPerUserLimit",
                          f"user {spec.user} already has {n} jobs in QOS {qn} (limit "
                          f"{q.limits.max_submit_per_user})")
    denial: tuple[str, str] | None = None
    for opt in pl.options:
        hit = per_job(q.limits, request_tres(opt.shape, table, opt.partition.name),
                      opt.time_limit_s, "QOS")
        if hit is None:
            return None
        denial = denial or hit
    assert denial is not None
    return Reject(job_id, denial[0], denial[1])


def request_tres(shape: Shape, table: NodeTable, partition: str) -> Tres:
    """The TRES a job asks for at its smallest start (for limits)."""
    cpus = mem = gpus = 0
    pmask = table.part_masks.get(partition, 0)
    cls = table.class_of[iter_bits(pmask)[0]] if pmask else 0
    for ts in shape.sets:
        d = demand(ts, table, cls) if table.class_specs else None
        nodes = ts.nodes_min if ts.fixed else max(ts.nodes_min, 1 if ts.min_tasks else 0)
        cpus += ts.min_tasks * ts.cpus_per_task
        if d is not None:
            mem += d.mem_per_node * nodes + d.mem_per_task * ts.min_tasks
        gpus += ts.gpus_per_node * nodes + ts.gpus_per_task * ts.min_tasks + ts.gpus_total
    return Tres(cpus, mem, gpus, shape.nodes_min)
