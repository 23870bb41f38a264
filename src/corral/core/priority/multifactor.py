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

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from operator import attrgetter, is_not, itemgetter
from typing import TypeVar, overload

from corral.core.config import FairshareAlgorithm, Ordering, PriorityWeights, SchedulerConfig
from corral.core.model.account import ROOT_ACCOUNT, AccountTree
from corral.core.model.job import HoldKind, Job
from corral.core.model.node import Node
from corral.core.priority.eligibility import Eligibility
from corral.core.priority.fs_cache import FairShareCache
from corral.core.priority.orderings import TimeLimits, requested_procs
from corral.core.snapshot import ClusterSnapshot

FACTOR_NAMES = ("age", "assoc", "fairshare", "job_size", "partition", "qos")

_ID = attrgetter("id")
_T = TypeVar("_T")
_SPEC = attrgetter("spec")
_NUMBER = itemgetter(1)
# per pending job, what its priority takes from the job alone in one context (``_job_terms``):
# (job, association number, eligible since, site factor, w_js * job size, w_part * partition
# factor, w_qos * qos factor, nice); the association's number is its place in
# ``_Memo.assoc_keys`` (a small int: cheaper to hash per job than the key tuple).
# ``since`` is None for a job whose age is off the common path (an admin priority, held,
# dependencies, eligibility given by the shell), the job size None for sizes that are not
# plain (favor small, relative to time): those parts come from a full context of the call.
# The job is held, so its id stays its own.
JobTerms = tuple[Job, int, float | None, float, float | None, float, float, float]


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
    job_context: tuple[object, ...] | None = None
    job_static: MultifactorContext | None = None  # the static context ``job_context`` is of
    job_terms: dict[int, JobTerms] = field(default_factory=dict)
    assoc_keys: list[tuple[str, str]] = field(default_factory=list)  # by number
    assoc_numbers: dict[tuple[str, str], int] = field(default_factory=dict)
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


class Priorities(Mapping[int, float]):
    """Priority per pending job id, as ``compute`` returns it, kept as the values in the
    order of the ``pending`` tuple they were computed for: ``in_order[k]`` is the priority
    of ``pending[k]``. The queue order sorts them as they are (``passes.order``); the
    mapping by job id is built on the first lookup (a replay's queue walk reads a few)."""

    __slots__ = ("pending", "in_order", "_by_id")

    def __init__(self, pending: tuple[Job, ...], in_order: list[float]) -> None:
        if len(in_order) != len(pending):
            raise ValueError(f"Priorities: {len(pending)} jobs but {len(in_order)} values")
        self.pending = pending
        self.in_order = in_order
        self._by_id: dict[int, float] | None = None

    def _mapping(self) -> dict[int, float]:
        got = self._by_id
        if got is None:
            got = self._by_id = dict(zip(map(_ID, self.pending), self.in_order, strict=True))
        return got

    def by_id(self) -> dict[int, float]:
        """The priorities as a plain dict by job id (built once; not to be changed)."""
        return self._mapping()

    def __getitem__(self, job_id: int) -> float:
        return self._mapping()[job_id]

    @overload
    def get(self, job_id: int, /) -> float | None: ...
    @overload
    def get(self, job_id: int, /, default: float | _T) -> float | _T: ...

    def get(self, job_id: int, /, default: object = None) -> object:
        return self._mapping().get(job_id, default)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._mapping()

    def __iter__(self) -> Iterator[int]:
        return iter(self._mapping())

    def __len__(self) -> int:
        return len(self.in_order)

    def __repr__(self) -> str:
        return f"Priorities({self._mapping()!r})"


def _job_terms(ctx: MultifactorContext, pending: tuple[Job, ...],
               plain_size: bool) -> list[JobTerms]:
    """``JobTerms`` of every pending job, in order: kept across calls (jobs are frozen)
    while the context they depend on (weights, cluster size, partitions, QOS, default
    accounts) compares equal, and bounded."""
    memo = _MEMO
    w = ctx.w
    if ctx is not memo.job_static:  # the same static context has the same inputs
        context = (w, ctx.node_count, ctx.cluster_cpus, ctx.parts, ctx.default_part,
                   ctx.qos_factor, ctx.default_acct, plain_size)
        if memo.job_context != context:
            memo.job_context = context
            memo.job_terms = {}
            memo.assoc_keys, memo.assoc_numbers = [], {}
        memo.job_static = ctx
    if len(memo.job_terms) > 2 * len(pending) + 10_000:
        # bounded by the queue: jobs long gone are not held for long
        memo.job_terms = {}
        memo.assoc_keys, memo.assoc_numbers = [], {}
    terms = memo.job_terms
    got: list[JobTerms | None] = list(map(terms.get, map(id, pending)))
    if not all(got):  # a None: a job not seen in this context (entries are non-empty)
        numbers, assoc_keys = memo.assoc_numbers, memo.assoc_keys
        inv_nc = 1.0 / ctx.node_count if ctx.node_count else 0.0
        inv_cc = 1.0 / ctx.cluster_cpus if ctx.cluster_cpus else 0.0
        default_acct = ctx.default_acct
        none = HoldKind.NONE
        # arrivals come last in a shell's queue: start at the first job not seen
        for k in range(got.index(None), len(got)):
            if got[k] is not None:
                continue
            job = pending[k]
            spec = job.spec
            user = spec.user
            since: float | None = None
            if job.admin_priority is None and job.hold is none and job.eligible_time is None \
                    and spec.dependency is None:
                since = job.submit_time
                begin = spec.begin_time
                if begin is not None and begin > since:
                    since = begin
            js: float | None = None
            if plain_size:
                size = (spec.nodes_min * inv_nc + requested_procs(spec) * inv_cc) * 0.5
                js = w.job_size * (1.0 if size > 1.0 else size)
            key = (spec.account or default_acct.get(user, ROOT_ACCOUNT), user)
            number = numbers.get(key)
            if number is None:
                number = numbers[key] = len(assoc_keys)
                assoc_keys.append(key)
            # site and nice as floats: ``float(i) + x`` is ``i + x`` (Python converts the
            # int the same way), and float-only arithmetic is the interpreter's fast case
            entry = (job, number, since, float(job.site_factor), js,
                     w.partition * ctx.partition_factor(spec.partitions),
                     w.qos * ctx.qos_factor.get(spec.qos or "normal", 0.0), float(spec.nice))
            terms[id(job)] = got[k] = entry
    return got  # type: ignore[return-value]  # no None is left


def _age(since: float, now: float, max_age: float) -> float:
    """The age factor of a job eligible since ``since``: ``MultifactorContext.age_factor``'s
    arithmetic, which the common path of ``multifactor_priorities`` inlines."""
    waited = now - since
    if waited <= 0:
        return 0.0
    if max_age <= 0 or waited >= max_age:
        return 1.0
    return waited / max_age


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
    same order of operations, with the common case inlined, what depends on the job
    alone kept per job across calls (``_job_terms``) and the rest of the context kept
    while its inputs are the same (``_static_context``): this runs every cycle over the
    whole queue. A job off the common path (held, dependencies, eligibility set by the
    shell, sizes relative to time) gets a full context of this call. The result keeps the
    values in ``pending`` order (``Priorities``); its mapping by id is built when read.
    """
    pending = snapshot.pending
    w = config.weights
    ctx = _static_context(snapshot, config, now)
    full: MultifactorContext | None = None  # this call's own, built when a job needs it
    plain_size = not (w.size_relative or w.favor_small) and ctx.cluster_cpus > 0
    terms = _job_terms(ctx, pending, plain_size)
    numbers = list(set(map(_NUMBER, terms)))
    keys = list(map(_MEMO.assoc_keys.__getitem__, numbers))
    fairshare: dict[tuple[str, str], float] = {}
    assoc: dict[tuple[str, str], float] = {}
    if w.fairshare or w.assoc:
        # the factors of these associations only (a flat tree counts instead of ranking)
        fairshare, assoc = _MEMO.fs.factors_of(snapshot.accounts, snapshot.usage, keys,
                                               config.fairshare)
    w_fs, w_assoc = w.fairshare, w.assoc
    # as floats where they convert exactly: ``int * float`` and ``float / int`` convert
    # the int this way first, and comparing with an exactly converted int is the same;
    # float-only arithmetic is the interpreter's fast case
    w_age: float | int = w.age
    max_age: float | int = w.max_age_s
    if float(w_age) == w_age and float(max_age) == max_age:
        w_age, max_age = float(w_age), float(max_age)
    # per association, its two weighted factors (the same products as per job)
    per_key = {number: (w_assoc * assoc.get(key, 0.0), w_fs * fairshare.get(key, 0.0))
               for number, key in zip(numbers, keys, strict=True)}
    saturated = max_age <= 0  # any wait gives the whole age factor
    values: list[float] = []
    add = values.append
    for job, key, since, site, js, part, qos, nice in terms:
        a_term, fs_term = per_key[key]
        if since is not None and js is not None:  # the common path, inline
            waited = now - since
            if waited <= 0:
                age = 0.0
            elif saturated or waited >= max_age:
                age = 1.0
            else:
                age = waited / max_age
            add(site + w_age * age + a_term + fs_term + js + part + qos - nice)
            continue
        if job.admin_priority is not None:
            add(float(job.admin_priority))
            continue
        if full is None:
            full = MultifactorContext(snapshot, config, now, factors_needed=False, keys=())
        age = _age(since, now, max_age) if since is not None else full.age_factor(job)
        if js is None:
            js = w.job_size * full.size_factor(job)
        add(site + w_age * age + a_term + fs_term + js + part + qos - nice)
    return Priorities(pending, values)
