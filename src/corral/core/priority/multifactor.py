"""Slurm ``priority/multifactor`` (22.05), so an admin's weights mean the same thing here.

    priority = site_factor
             + PriorityWeightAge       * age_factor
             + PriorityWeightAssoc     * assoc_factor
             + PriorityWeightFairshare * fairshare_factor
             + PriorityWeightJobSize   * job_size_factor
             + PriorityWeightPartition * partition_factor
             + PriorityWeightQOS       * qos_factor
             - nice

Every factor is in [0, 1]:

- **age** ``= min((now - eligible) / PriorityMaxAge, 1)``, counted from when the job
  became eligible (``eligibility``: not while held, before its begin time or with unmet
  dependencies); 0 while not eligible. ``PriorityMaxAge <= 0`` gives 1 once eligible.
- **fairshare** from Fair Tree (default) or classic (``SchedulerConfig.fairshare``) over
  the association of the job (``decay.association_of``).
- **job size** (nodes ``N`` and CPUs ``C`` requested; cluster of ``Nc`` nodes and ``Cc``
  CPUs): ``(N/Nc + C/Cc) / 2``; with ``PriorityFavorSmall``
  ``((Nc-N)/Nc + (Cc-C)/Cc) / 2``; with ``SMALL_RELATIVE_TO_TIME``
  ``max(N * Cc/Nc, C) / time_limit_minutes / Cc`` (and ``1 -`` that when favoring small).
- **partition** ``= PriorityJobFactor of the job's partition / max over all partitions``
  (the best of the partitions a job may run in).
- **qos** ``= QOS priority / max QOS priority`` (job without a QOS: ``normal`` if defined).
- **assoc** ``= association priority / max association priority``.
- **site** (``Job.site_factor``) and **nice** are added/subtracted unweighted.

``Job.admin_priority`` (``scontrol update Priority=``) replaces the computed value.
Unlike Slurm the result is not truncated to an integer or clamped at 1: ordering keeps
the fractions (``sprio`` front ends round). TRES weights (``PriorityWeightTRES``) are not
modelled. Reference: Slurm 22.05 ``priority_multifactor.html`` and
``src/plugins/priority/multifactor/priority_multifactor.c``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from operator import attrgetter, is_not, itemgetter

from corral.core.config import FairshareAlgorithm, Ordering, PriorityWeights, SchedulerConfig
from corral.core.model.account import ROOT_ACCOUNT, AccountTree
from corral.core.model.job import HoldKind, Job, JobSpec
from corral.core.model.node import Node
from corral.core.priority.eligibility import Eligibility
from corral.core.priority.fs_cache import FairShareCache
from corral.core.priority.orderings import TimeLimits, requested_procs
from corral.core.snapshot import ClusterSnapshot

FACTOR_NAMES = ("age", "assoc", "fairshare", "job_size", "partition", "qos")

_ID = attrgetter("id")
_SPEC = attrgetter("spec")
_KEY = itemgetter(1)
# per spec, what its priority takes from the spec alone in one context: (spec,
# association key, w_js * job size or None, w_part * partition factor, w_qos * qos
# factor, nice, begin time, has no dependency); the spec is held, so its id stays its own
SpecTerms = tuple[JobSpec, tuple[str, str], float | None, float, float, int, float | None,
                  bool]


@dataclass(frozen=True, slots=True)
class Factor:
    name: str
    value: float  # normalized, in [0, 1]
    weight: int

    @property
    def contribution(self) -> float:
        return self.value * self.weight


@dataclass(frozen=True, slots=True)
class PriorityFactors:
    """Why a job has its priority: what ``sprio -l`` and ``corral show`` print."""

    job_id: int
    factors: tuple[Factor, ...]  # in FACTOR_NAMES order
    site: int
    nice: int
    computed: float  # site + weighted sum - nice
    admin_priority: int | None
    total: float  # what ``compute`` returns: admin_priority when set, else computed
    ordering: Ordering = Ordering.MULTIFACTOR

    def factor(self, name: str) -> Factor:
        for f in self.factors:
            if f.name == name:
                return f
        raise KeyError(name)


@dataclass(slots=True)
class _Memo:
    """What the per-call computations that do not depend on the jobs themselves kept
    from the last call: the cluster size (inputs compared by identity: the node tuple is
    immutable) and the fair-share tree and ranking (``fs_cache``: reused only where the
    result is provably the same). The simulator prioritizes the queue at every event, so
    this saves most of the cost of a call.
    """

    nodes: tuple[Node, ...] | None = None
    size: tuple[int, int] = (0, 0)
    fs: FairShareCache = field(default_factory=FairShareCache)
    accounts_of: AccountTree | None = None
    default_acct: dict[str, str] = field(default_factory=dict)
    spec_context: tuple[object, ...] | None = None
    spec_terms: dict[int, SpecTerms] = field(default_factory=dict)
    # ``_static_context``: its inputs (frozen values, compared by identity) and the context
    static_inputs: tuple[object, ...] | None = None
    static: MultifactorContext | None = None


_MEMO = _Memo()


def clear_memo() -> None:
    """Forget the memoized cluster size and fair-share results (benchmarks, tests)."""
    global _MEMO
    _MEMO = _Memo()


def _cluster_size(nodes: tuple[Node, ...]) -> tuple[int, int]:
    """(node count, CPU count) of the cluster."""
    memo = _MEMO
    if memo.nodes is not nodes:
        size = (len(nodes), sum(n.spec.cpus for n in nodes))
        memo.nodes, memo.size = nodes, size
    return memo.size


def _default_accounts(tree: AccountTree) -> dict[str, str]:
    """Each user's default account (same rule as ``decay.association_of``); shared,
    read-only, kept while the tree object is the same."""
    memo = _MEMO
    if memo.accounts_of is tree:
        return memo.default_acct
    default_acct: dict[str, str] = {}
    explicit: set[str] = set()
    for a in tree.associations:
        if a.is_default and a.user not in explicit:
            explicit.add(a.user)
            default_acct[a.user] = a.account
        elif a.user not in default_acct:
            default_acct[a.user] = a.account
    memo.accounts_of, memo.default_acct = tree, default_acct
    return default_acct


def _fairshare(
    tree: AccountTree,
    usage: Mapping[tuple[str, str], float],
    keys: set[tuple[str, str]],
    algorithm: FairshareAlgorithm,
) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], float]]:
    """(fair-share factor, assoc factor) per association; the dicts are shared, read-only."""
    return _MEMO.fs.factors(tree, usage, keys, algorithm)


class MultifactorContext:
    """Everything the factors need, computed once per call; then O(1) per job."""

    def __init__(self, snapshot: ClusterSnapshot, config: SchedulerConfig, now: float,
                 *, factors_needed: bool = True,
                 keys: Collection[tuple[str, str]] | None = None) -> None:
        """``factors_needed=False``: the fair-share and assoc factors are left empty when
        both their weights are 0 (they cannot change a priority; ``explain`` needs them).
        ``keys``: the associations to compute them for (default: the pending jobs'); an
        empty collection leaves them empty, for a caller that fills them itself."""
        self.now = now
        self.w: PriorityWeights = config.weights
        tree = snapshot.accounts
        self.default_acct = _default_accounts(tree)
        w = config.weights
        self.fairshare: dict[tuple[str, str], float]
        self.assoc: dict[tuple[str, str], float]
        if keys is not None and not keys:
            self.fairshare, self.assoc = {}, {}
        elif factors_needed or w.fairshare or w.assoc:
            if keys is None:
                keys = {self.key_of(j) for j in snapshot.pending}
            self.fairshare, self.assoc = _fairshare(tree, snapshot.usage, set(keys),
                                                    config.fairshare)
        else:
            self.fairshare, self.assoc = {}, {}
        self.parts = {p.name: p.priority_job_factor for p in snapshot.partitions}
        self.max_part = max(self.parts.values(), default=0)
        default = snapshot.default_partition()
        self.default_part = default.name if default else ""
        self.part_cache: dict[tuple[str, ...], float] = {}
        self.qos = {q.name: q.priority for q in snapshot.qos}
        max_q = max(self.qos.values(), default=0)
        self.qos_factor = {n: max(p, 0) / max_q for n, p in self.qos.items()} if max_q > 0 else {}
        self.node_count, self.cluster_cpus = _cluster_size(snapshot.nodes)
        self.limits = TimeLimits(snapshot, config)
        self.eligibility = Eligibility(snapshot)

    def key_of(self, job: Job) -> tuple[str, str]:
        spec = job.spec
        if spec.account:
            return (spec.account, spec.user)
        return (self.default_acct.get(spec.user, ROOT_ACCOUNT), spec.user)

    def partition_factor(self, partitions: tuple[str, ...]) -> float:
        got = self.part_cache.get(partitions)
        if got is None:
            if self.max_part <= 0:
                got = 0.0
            else:
                names = partitions or (self.default_part,)
                got = max(max(self.parts.get(n, 0), 0) for n in names) / self.max_part
            self.part_cache[partitions] = got
        return got

    def age_factor(self, job: Job) -> float:
        since = self.eligibility.since(job)
        if since is None:
            return 0.0
        waited = self.now - since
        if waited <= 0:
            return 0.0
        max_age = self.w.max_age_s
        if max_age <= 0 or waited >= max_age:
            return 1.0
        return waited / max_age

    def size_factor(self, job: Job) -> float:
        nc, cc = self.node_count, self.cluster_cpus
        if nc <= 0:
            return 0.0
        spec = job.spec
        nodes = spec.nodes_min
        cpus = requested_procs(spec)
        w = self.w
        if w.size_relative:
            size = max(nodes * cc / nc, float(cpus))
            minutes = max(self.limits.of(job) / 60.0, 1.0)
            js = size / minutes / cc if cc > 0 else 0.0
            if w.favor_small:
                js = 1.0 - js
        elif w.favor_small:
            js = (nc - nodes) / nc
            if cc > 0 and cpus:
                js = (js + (cc - cpus) / cc) / 2
        else:
            js = nodes / nc
            if cc > 0 and cpus:
                js = (js + cpus / cc) / 2
        return 0.0 if js < 0.0 else 1.0 if js > 1.0 else js

    def qos_of(self, job: Job) -> float:
        name = job.spec.qos or "normal"
        return self.qos_factor.get(name, 0.0)

    def values(self, job: Job) -> tuple[float, float, float, float, float, float]:
        """The normalized factors in ``FACTOR_NAMES`` order."""
        key = self.key_of(job)
        return (
            self.age_factor(job),
            self.assoc.get(key, 0.0),
            self.fairshare.get(key, 0.0),
            self.size_factor(job),
            self.partition_factor(job.spec.partitions),
            self.qos_of(job),
        )

    def computed(self, job: Job) -> float:
        w = self.w
        age, assoc, fs, js, part, qos = self.values(job)
        return (
            job.site_factor
            + w.age * age
            + w.assoc * assoc
            + w.fairshare * fs
            + w.job_size * js
            + w.partition * part
            + w.qos * qos
            - job.spec.nice
        )

    def explain(self, job: Job) -> PriorityFactors:
        w = self.w
        weights = (w.age, w.assoc, w.fairshare, w.job_size, w.partition, w.qos)
        values = self.values(job)
        factors = tuple(
            Factor(n, v, wt) for n, v, wt in zip(FACTOR_NAMES, values, weights, strict=True)
        )
        computed = self.computed(job)
        total = float(job.admin_priority) if job.admin_priority is not None else computed
        return PriorityFactors(
            job.id, factors, job.site_factor, job.spec.nice, computed, job.admin_priority, total
        )


class Priorities(dict[int, float]):
    """Priority per pending job id, as ``compute`` returns it, that also keeps the same
    values in the order of the ``pending`` tuple they were computed for (``values``), so
    the queue order can sort them without looking each job up again
    (``passes.order``). ``in_order[k]`` is the priority of ``pending[k]``."""

    __slots__ = ("pending", "in_order")

    def __init__(self, pending: tuple[Job, ...], in_order: list[float]) -> None:
        super().__init__(zip(map(_ID, pending), in_order, strict=True))
        self.pending = pending
        self.in_order = in_order


def _spec_terms(ctx: MultifactorContext, pending: tuple[Job, ...],
                plain_size: bool) -> list[SpecTerms]:
    """``SpecTerms`` of every pending job's spec, in order: kept across calls while the
    context they depend on (weights, cluster size, partitions, QOS, default accounts)
    compares equal, and bounded."""
    memo = _MEMO
    w = ctx.w
    context = (w, ctx.node_count, ctx.cluster_cpus, ctx.parts, ctx.default_part,
               ctx.qos_factor, ctx.default_acct, plain_size)
    # bounded by the queue: specs of jobs long gone are not held for long
    if memo.spec_context != context or len(memo.spec_terms) > 2 * len(pending) + 10_000:
        memo.spec_context = context
        memo.spec_terms = {}
    terms = memo.spec_terms
    got: list[SpecTerms | None] = list(map(terms.get, map(id, map(_SPEC, pending))))
    if None in got:
        inv_nc = 1.0 / ctx.node_count if ctx.node_count else 0.0
        inv_cc = 1.0 / ctx.cluster_cpus if ctx.cluster_cpus else 0.0
        default_acct = ctx.default_acct
        for k, entry in enumerate(got):
            if entry is not None:
                continue
            spec = pending[k].spec
            entry = terms.get(id(spec))
            if entry is None:
                user = spec.user
                js: float | None = None
                if plain_size:
                    size = (spec.nodes_min * inv_nc + requested_procs(spec) * inv_cc) * 0.5
                    js = w.job_size * (1.0 if size > 1.0 else size)
                entry = (spec, (spec.account or default_acct.get(user, ROOT_ACCOUNT), user), js,
                         w.partition * ctx.partition_factor(spec.partitions),
                         w.qos * ctx.qos_factor.get(spec.qos or "normal", 0.0), spec.nice,
                         spec.begin_time, spec.dependency is None)
                terms[id(spec)] = entry
            got[k] = entry
    return got  # type: ignore[return-value]  # no None is left


def _static_context(snapshot: ClusterSnapshot, config: SchedulerConfig,
                    now: float) -> MultifactorContext:
    """A context for what does not depend on the jobs or the time (weights, cluster size,
    partition and QOS factors, default accounts), kept while the config, account tree,
    partitions, QOS and nodes are the same objects (all frozen). Its ``now``, time limits
    and eligibility are those of the call that built it: not to be read."""
    memo = _MEMO
    inputs = (config, snapshot.accounts, snapshot.partitions, snapshot.qos, snapshot.nodes)
    kept = memo.static_inputs
    if memo.static is None or kept is None or any(map(is_not, inputs, kept)):
        memo.static = MultifactorContext(snapshot, config, now, factors_needed=False, keys=())
        memo.static_inputs = inputs
    return memo.static


def multifactor_priorities(
    snapshot: ClusterSnapshot, config: SchedulerConfig, now: float
) -> Priorities:
    """Multifactor priority of every pending job (``admin_priority`` wins when set).

    Same arithmetic as ``MultifactorContext.computed`` (tests hold them equal), in the
    same order of operations, with the common case inlined, what depends on the spec
    alone kept per spec across calls (``_spec_terms``) and the rest of the context kept
    while its inputs are the same (``_static_context``): this runs every cycle over the
    whole queue. A job off the common path (held, dependencies, eligibility set by the
    shell, sizes relative to time) gets a full context of this call.
    """
    pending = snapshot.pending
    w = config.weights
    ctx = _static_context(snapshot, config, now)
    full: MultifactorContext | None = None  # this call's own, built when a job needs it
    plain_size = not (w.size_relative or w.favor_small) and ctx.cluster_cpus > 0
    terms = _spec_terms(ctx, pending, plain_size)
    keys = set(map(_KEY, terms))
    fairshare: dict[tuple[str, str], float] = {}
    assoc: dict[tuple[str, str], float] = {}
    if w.fairshare or w.assoc:
        # the factors of these associations only (a flat tree counts instead of ranking)
        fairshare, assoc = _MEMO.fs.factors_of(snapshot.accounts, snapshot.usage, keys,
                                               config.fairshare)
    w_age, w_fs, w_assoc = w.age, w.fairshare, w.assoc
    # per association, its two weighted factors (the same products as per job)
    per_key = {key: (w_assoc * assoc.get(key, 0.0), w_fs * fairshare.get(key, 0.0))
               for key in keys}
    max_age = w.max_age_s
    none = HoldKind.NONE
    values: list[float] = []
    add = values.append
    for job, (_, key, js, part, qos, nice, begin, no_dependency) in zip(pending, terms,
                                                                         strict=True):
        if job.admin_priority is not None:
            add(float(job.admin_priority))
            continue
        # age (fast path: not held, no dependency, eligibility not given by the shell)
        if job.hold is none and job.eligible_time is None and no_dependency:
            since = job.submit_time
            if begin is not None and begin > since:
                since = begin
            waited = now - since
            if waited <= 0:
                age = 0.0
            elif max_age <= 0 or waited >= max_age:
                age = 1.0
            else:
                age = waited / max_age
        else:
            if full is None:
                full = MultifactorContext(snapshot, config, now, factors_needed=False, keys=())
            age = full.age_factor(job)
        if js is None:
            if full is None:
                full = MultifactorContext(snapshot, config, now, factors_needed=False, keys=())
            js = w.job_size * full.size_factor(job)
        a_term, fs_term = per_key[key]
        add(job.site_factor + w_age * age + a_term + fs_term + js + part + qos - nice)
    return Priorities(pending, values)
