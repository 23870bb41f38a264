"""QOS and association (account) limits: hold a job with Slurm's reason instead of starting it.

Usage is counted over running jobs (RUNNING, SUSPENDED, COMPLETING) and updated as the
cycle starts jobs, so a limit is never overshot within a cycle. A job is held when
starting it would exceed:

* its QOS: ``MaxJobsPU`` (QOSMaxJobsPerUserLimit), ``MaxTRESPU`` (QOSMaxCpuPerUserLimit,
  QOSMaxMemoryPerUser, QOSMaxGRESPerUser), ``MaxJobsPA`` (QOSMaxJobsPerAccountLimit),
  ``MaxTRESPA`` (QOSMaxCpuPerAccountLimit, ...), ``GrpJobs`` (QOSGrpJobsLimit), ``GrpTRES``
  (QOSGrpCpuLimit, QOSGrpMemLimit, QOSGrpGRES), and per job ``MaxTRESPerJob``,
  ``MaxNodesPerJob``, ``MaxWall`` (QOSMaxCpuPerJobLimit, QOSMaxNodePerJobLimit,
  QOSMaxWallDurationPerJobLimit, ...);
* its account or any ancestor (usage of the whole subtree): ``GrpJobs``
  (AssocGrpJobsLimit), ``GrpTRES`` (AssocGrpCpuLimit, AssocGrpMemLimit, AssocGrpGRES),
  ``MaxJobs`` per user (AssocMaxJobsLimit), and the per-job limits (AssocMaxCpuPerJobLimit,
  AssocMaxNodesPerJobLimit, AssocMaxWallDurationPerJobLimit).

TRES counted: CPUs, memory (MB) and GPUs; nodes for the per-job node limit. A pending job's
TRES are its request at the smallest start; a running job's are its allocation.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.core.model.account import AccountTree
from corral.core.model.job import Job
from corral.core.model.partition import Qos, QosLimits
from corral.core.model.resources import Resources

_EMPTY = QosLimits()


@dataclass(frozen=True, slots=True)
class Tres:
    cpus: int = 0
    mem_mb: int = 0
    gpus: int = 0
    nodes: int = 0


def job_tres(job: Job) -> Tres:
    a = job.allocation
    if a is None:
        return Tres()
    return Tres(a.cpus, sum(n.mem_mb for n in a.nodes), sum(len(n.gpus) for n in a.nodes),
                len(a.node_names))


def qos_name(job: Job, qos: dict[str, Qos]) -> str | None:
    if job.spec.qos:
        return job.spec.qos
    return "normal" if "normal" in qos else None


def account_of(job: Job, accounts: AccountTree) -> str | None:
    if job.spec.account:
        return job.spec.account
    for a in accounts.associations:
        if a.user == job.spec.user and a.is_default:
            return a.account
    return None


def _over(limit: Resources | None, used: Tres, add: Tres) -> str | None:
    """Which TRES of ``limit`` (cpu/mem/gres) ``used + add`` exceeds; ``None`` if none."""
    if limit is None:
        return None
    if limit.cpus and used.cpus + add.cpus > limit.cpus:
        return "cpu"
    if limit.mem_mb and used.mem_mb + add.mem_mb > limit.mem_mb:
        return "mem"
    if limit.gpus and used.gpus + add.gpus > limit.gpus:
        return "gres"
    return None


_QOS_TRES_USER = {"cpu": "QOSMaxCpuPerUserLimit", "mem": "QOSMaxMemoryPerUser",
                  "gres": "QOSMaxGRESPerUser"}
_QOS_TRES_ACCT = {"cpu": "QOSMaxCpuPerAccountLimit", "mem": "QOSMaxMemoryPerAccount",
                  "gres": "QOSMaxGRESPerAccount"}
_QOS_GRP = {"cpu": "QOSGrpCpuLimit", "mem": "QOSGrpMemLimit", "gres": "QOSGrpGRES"}
_QOS_JOB = {"cpu": "QOSMaxCpuPerJobLimit", "mem": "QOSMaxMemoryPerJob",
            "gres": "QOSMaxGRESPerJob"}
_ASSOC_GRP = {"cpu": "AssocGrpCpuLimit", "mem": "AssocGrpMemLimit", "gres": "AssocGrpGRES"}
_ASSOC_JOB = {"cpu": "AssocMaxCpuPerJobLimit", "mem": "AssocMaxMemPerJob",
              "gres": "AssocMaxGRESPerJob"}
_ASSOC_USER = {"cpu": "AssocMaxCpuPerUserLimit", "mem": "AssocMaxMemPerUserLimit",
               "gres": "AssocMaxGRESPerUserLimit"}


def _plus(a: Tres, b: Tres) -> Tres:
    return Tres(a.cpus + b.cpus, a.mem_mb + b.mem_mb, a.gpus + b.gpus, a.nodes + b.nodes)


class LimitState:
    """Usage per QOS/user/account, and the checks (see the module docstring)."""

    __slots__ = ("enabled", "qos", "accounts", "jobs", "tres")

    def __init__(self, qos: tuple[Qos, ...], accounts: AccountTree,
                 running: tuple[Job, ...]) -> None:
        self.qos = {q.name: q for q in qos}
        self.accounts = accounts
        self.enabled = any(q.limits != _EMPTY for q in qos) or any(
            a.limits != _EMPTY for a in accounts.accounts)
        self.jobs: dict[tuple[str, ...], int] = {}
        self.tres: dict[tuple[str, ...], Tres] = {}
        if self.enabled:
            for j in running:
                self.add(j, job_tres(j))

    def _keys(self, job: Job) -> list[tuple[str, ...]]:
        keys: list[tuple[str, ...]] = []  # heterogeneous key tuples
        q = qos_name(job, self.qos)
        acct = account_of(job, self.accounts)
        if q is not None:
            keys.append(("qu", q, job.spec.user))
            keys.append(("q", q))
            if acct is not None:
                keys.append(("qa", q, acct))
        if acct is not None:
            for a in self.accounts.ancestors(acct):
                keys.append(("a", a))
                keys.append(("au", a, job.spec.user))
        return keys

    def add(self, job: Job, tres: Tres) -> None:
        if not self.enabled:
            return
        for k in self._keys(job):
            self.jobs[k] = self.jobs.get(k, 0) + 1
            self.tres[k] = _plus(self.tres.get(k, Tres()), tres)

    def check(self, job: Job, tres: Tres, time_limit_s: int) -> tuple[str, str] | None:
        """(reason, detail) when a limit holds ``job``; ``None`` when it may start."""
        if not self.enabled:
            return None
        user = job.spec.user
        qn = qos_name(job, self.qos)
        q = self.qos.get(qn) if qn is not None else None
        acct = account_of(job, self.accounts)
        zero = Tres()
        if q is not None and q.limits != _EMPTY:
            lim = q.limits
            hit = per_job(lim, tres, time_limit_s, "QOS")
            if hit:
                return hit
            ku = ("qu", q.name, user)
            if lim.max_jobs_per_user is not None and self.jobs.get(ku, 0) >= lim.max_jobs_per_user:
                return ("QOSMaxJobsPerUserLimit",
                        f"user {user} already runs {self.jobs.get(ku, 0)} jobs in QOS {q.name} "
                        f"(limit {lim.max_jobs_per_user})")
            w = _over(lim.max_tres_per_user, self.tres.get(ku, zero), tres)
            if w:
                return _QOS_TRES_USER[w], f"QOS {q.name} per-user {w} limit reached for {user}"
            if acct is not None:
                ka_q: tuple[str, ...] = ("qa", q.name, acct)
                if (lim.max_jobs_per_account is not None
                        and self.jobs.get(ka_q, 0) >= lim.max_jobs_per_account):
                    return ("QOSMaxJobsPerAccountLimit",
                            f"account {acct} already runs {self.jobs.get(ka_q, 0)} jobs in QOS "
                            f"{q.name} (limit {lim.max_jobs_per_account})")
                w = _over(lim.max_tres_per_account, self.tres.get(ka_q, zero), tres)
                if w:
                    return (_QOS_TRES_ACCT[w],
                            f"QOS {q.name} per-account {w} limit reached for {acct}")
            kq = ("q", q.name)
            if lim.grp_jobs is not None and self.jobs.get(kq, 0) >= lim.grp_jobs:
                return ("QOSGrpJobsLimit",
                        f"QOS {q.name} already runs {self.jobs.get(kq, 0)} jobs (limit "
                        f"{lim.grp_jobs})")
            w = _over(lim.grp_tres, self.tres.get(kq, zero), tres)
            if w:
                return _QOS_GRP[w], f"QOS {q.name} group {w} limit reached"
        if acct is not None:
            for a in self.accounts.ancestors(acct):
                node = self.accounts.account(a)
                if node is None or node.limits == _EMPTY:
                    continue
                lim = node.limits
                hit = per_job(lim, tres, time_limit_s, "Assoc")
                if hit:
                    return hit
                ka: tuple[str, ...] = ("a", a)
                if lim.grp_jobs is not None and self.jobs.get(ka, 0) >= lim.grp_jobs:
                    return ("AssocGrpJobsLimit",
                            f"account {a} already runs {self.jobs.get(ka, 0)} jobs (limit "
                            f"{lim.grp_jobs})")
                w = _over(lim.grp_tres, self.tres.get(ka, zero), tres)
                if w:
                    return _ASSOC_GRP[w], f"account {a} group {w} limit reached"
                kau = ("au", a, user)
                if (lim.max_jobs_per_user is not None
                        and self.jobs.get(kau, 0) >= lim.max_jobs_per_user):
                    return ("AssocMaxJobsLimit",
                            f"user {user} already runs {self.jobs.get(kau, 0)} jobs in account "
                            f"{a} (limit {lim.max_jobs_per_user})")
                w = _over(lim.max_tres_per_user, self.tres.get(kau, zero), tres)
                if w:
                    return _ASSOC_USER[w], f"account {a} per-user {w} limit reached for {user}"
        return None


def per_job(lim: QosLimits, tres: Tres, time_limit_s: int, kind: str) -> tuple[str, str] | None:
    """Per-job limits of a QOS (``kind='QOS'``) or an account (``'Assoc'``)."""
    w = _over(lim.max_tres_per_job, Tres(), tres)
    if w:
        table = _QOS_JOB if kind == "QOS" else _ASSOC_JOB
        return table[w], f"the job's {w} request exceeds the {kind} per-job limit"
    if lim.max_nodes_per_job is not None and tres.nodes > lim.max_nodes_per_job:
        code = "QOSMaxNodePerJobLimit" if kind == "QOS" else "AssocMaxNodesPerJobLimit"
        return code, f"{tres.nodes} nodes exceed the {kind} limit of {lim.max_nodes_per_job}"
    if lim.max_wall_s is not None and time_limit_s > lim.max_wall_s:
        code = ("QOSMaxWallDurationPerJobLimit" if kind == "QOS"
                else "AssocMaxWallDurationPerJobLimit")
        return code, f"time limit {time_limit_s}s exceeds the {kind} limit of {lim.max_wall_s}s"
    return None
