"""Usage that decays with a half-life (Slurm ``PriorityDecayHalfLife``), as pure functions.

Fair share looks at *decayed* usage: a CPU-second consumed ``t`` seconds ago counts
``2 ** (-t / half_life)`` CPU-seconds now. The shell (controller or simulator) keeps one
number per association ``(account, user)`` and brings it forward with ``decay`` whenever
time passes, adding new consumption with ``charge_cpu_seconds``; the snapshot's ``usage``
holds the result, already decayed to ``now``.

Invariants:

- ``decay(decay(u, a, h), b, h) == decay(u, a + b, h)`` (up to float rounding): decaying in
  steps is the same as decaying once, so the shell may update as often as it likes;
- ``half_life_s <= 0`` disables decay (Slurm: ``PriorityDecayHalfLife=0``);
- ``charge_cpu_seconds`` integrates the decay continuously over the run, so charging a job
  in one piece at its end equals charging it in slices, each decayed to ``now``.

Reference: Slurm ``priority_multifactor`` documentation, "PriorityDecayHalfLife"; Slurm
applies the decay at every ``PriorityCalcPeriod`` (5 min) as a step function, which the
continuous form here approximates from above by at most one period's decay.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from corral.core.model.account import ROOT_ACCOUNT, AccountTree
from corral.core.model.job import Job, JobSpec
from corral.core.priority.orderings import requested_procs

LN2 = math.log(2.0)


def decay_factor(elapsed_s: float, half_life_s: float) -> float:
    """Multiplier after ``elapsed_s``: ``2 ** (-elapsed_s / half_life_s)`` (1 if disabled)."""
    if half_life_s <= 0 or elapsed_s <= 0:
        return 1.0
    return math.exp(-LN2 * elapsed_s / half_life_s)


def decay(usage: float, elapsed_s: float, half_life_s: float) -> float:
    """``usage`` brought forward by ``elapsed_s`` seconds."""
    return usage * decay_factor(elapsed_s, half_life_s)


def charge_cpu_seconds(
    cpus: float,
    start: float,
    end: float,
    now: float,
    half_life_s: float,
    usage_factor: float = 1.0,
) -> float:
    """Decayed CPU-seconds, as of ``now``, of ``cpus`` used from ``start`` to ``end``.

    The exact integral of ``cpus * 2 ** (-(now - t) / h)`` over ``[start, min(end, now)]``
    times ``usage_factor`` (the QOS ``UsageFactor``). Without decay it is just
    ``cpus * (end - start)``.
    """
    end = min(end, now)
    if end <= start or cpus <= 0:
        return 0.0
    if half_life_s <= 0:
        return cpus * (end - start) * usage_factor
    k = LN2 / half_life_s
    # integral_{start}^{end} e^{-k (now - t)} dt = (e^{-k(now-end)} - e^{-k(now-start)}) / k
    value = (math.exp(-k * (now - end)) - math.exp(-k * (now - start))) / k
    return cpus * value * usage_factor


def association_of(spec: JobSpec, tree: AccountTree) -> tuple[str, str]:
    """The ``(account, user)`` a job charges and is ranked under.

    The job's account when given; else the user's default association (``is_default``),
    else the user's first association, else ``(root, user)``.
    """
    if spec.account:
        return (spec.account, spec.user)
    first: str | None = None
    for a in tree.associations:
        if a.user == spec.user:
            if a.is_default:
                return (a.account, a.user)
            if first is None:
                first = a.account
    return (first or ROOT_ACCOUNT, spec.user)


def job_cpus(job: Job) -> int:
    """CPUs a job holds (its allocation), or requests when it has none yet."""
    if job.allocation is not None:
        return job.allocation.cpus
    return requested_procs(job.spec)


def add_job_charge(
    usage: Mapping[tuple[str, str], float],
    job: Job,
    tree: AccountTree,
    since: float,
    now: float,
    half_life_s: float,
    usage_factor: float = 1.0,
) -> dict[tuple[str, str], float]:
    """A copy of ``usage`` (already decayed to ``now``) plus the job's run in ``[since, now]``.

    Charges the job's CPUs from ``max(start_time, since)`` to ``min(end_time or now, now)``,
    decayed to ``now``, to ``association_of(job.spec, tree)``. Call it once per running or
    just-finished job with ``since`` = the previous accounting time, after decaying the old
    usage by ``now - since``.
    """
    out = dict(usage)
    if job.start_time is None:
        return out
    start = max(job.start_time, since)
    end = job.end_time if job.end_time is not None else now
    charge = charge_cpu_seconds(job_cpus(job), start, end, now, half_life_s, usage_factor)
    if charge:
        key = association_of(job.spec, tree)
        out[key] = out.get(key, 0.0) + charge
    return out


def decay_all(
    usage: Mapping[tuple[str, str], float], elapsed_s: float, half_life_s: float
) -> dict[tuple[str, str], float]:
    """Every association's usage brought forward by ``elapsed_s``."""
    f = decay_factor(elapsed_s, half_life_s)
    return {k: v * f for k, v in usage.items()}
