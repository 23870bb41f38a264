"""Policies by name, and several of them on one workload side by side.

A policy is written as ``+``-joined words, in any order:

* an ordering: ``fcfs``, ``sjf``, ``wfp3``, ``unicep`` (or ``uni``), ``f1``..``f4``,
  ``multifactor`` (Slurm priority/multifactor);
* a queue pass: ``strict`` (or ``nobf``), ``easy``, ``conservative`` (or ``cons``);
* a placement: ``pack`` (best fit), ``spread`` (least loaded), ``topology``;
* fair-share for ``multifactor``: ``fs`` (default weight) or ``nofs`` (weight 0);
* ``highest``: reservations persist until the job starts (Maui ``HIGHEST``), when the core
  supports it;
* ``guardN`` with a unit (``guard12h``, ``guard90m``, ``guard1.5d``): the starvation guard
  (``corral.core.priority.guard``): a job waiting that long goes ahead of every job that
  has not, in submit order.

Unspecified parts come from the base configuration (the cluster's ``[scheduler]`` section
or Corral's defaults: multifactor, EASY, pack). Examples: ``fcfs+easy``, ``sjf+strict``,
``multifactor+easy+nofs``, ``fcfs+easy+spread``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from corral.core.config import BackfillMode, Ordering, PlacementMode, SchedulerConfig
from corral.sim.cluster import SimCluster
from corral.sim.engine import EngineOptions, simulate
from corral.sim.result import SimResult
from corral.sim.workload import Workload

_ORDER = {o.value: o for o in Ordering} | {"uni": Ordering.UNICEP}
_PASS = {"strict": BackfillMode.NONE, "nobf": BackfillMode.NONE, "none": BackfillMode.NONE,
         "easy": BackfillMode.EASY, "conservative": BackfillMode.CONSERVATIVE,
         "cons": BackfillMode.CONSERVATIVE}
_PLACE = {p.value: p for p in PlacementMode}
_GUARD = re.compile(r"^guard(\d+(?:\.\d+)?)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}

DEFAULT_COMPARE = ("fcfs+strict", "fcfs+easy", "sjf+easy", "f1+easy", "fcfs+conservative",
                   "multifactor+easy")


class PolicyError(ValueError):
    pass


@dataclass(frozen=True)
class Policy:
    label: str
    config: SchedulerConfig


def parse_policy(text: str, base: SchedulerConfig | None = None) -> Policy:
    """``fcfs+easy`` and friends (see the module doc) on top of ``base``."""
    cfg = base or SchedulerConfig()
    words = [w for w in text.strip().lower().replace("/", "+").split("+") if w]
    if not words:
        raise PolicyError("empty policy name")
    changes: dict[str, object] = {}
    fairshare: bool | None = None
    for w in words:
        if w in _ORDER:
            changes["ordering"] = _ORDER[w]
        elif w in _PASS:
            changes["backfill"] = _PASS[w]
        elif w in _PLACE:
            changes["placement"] = _PLACE[w]
        elif w in ("fs", "fairshare"):
            fairshare = True
        elif w in ("nofs", "nofairshare"):
            fairshare = False
        elif _GUARD.match(w):
            m = _GUARD.match(w)
            assert m is not None
            changes["starvation_guard_s"] = round(float(m.group(1)) * _UNIT[m.group(2)])
        elif w == "highest":
            if not any(f.name == "reservation_policy" for f in dataclasses.fields(cfg)):
                raise PolicyError("this core has no persistent reservations (HIGHEST) yet")
            field_type = type(cfg.reservation_policy)
            changes["reservation_policy"] = field_type("highest")
        else:
            known = sorted(set(_ORDER) | set(_PASS) | set(_PLACE)
                           | {"fs", "nofs", "highest", "guardNh"})
            raise PolicyError(f"unknown policy word {w!r} in {text!r}; known: {', '.join(known)}")
    cfg = dataclasses.replace(cfg, **changes)  # type: ignore[arg-type]
    if fairshare is not None:
        weights = cfg.weights
        fs_weight = SchedulerConfig().weights.fairshare if fairshare else 0
        cfg = dataclasses.replace(cfg, weights=dataclasses.replace(weights, fairshare=fs_weight))
    return Policy(text.strip(), cfg)


def run_policies(
    workload: Workload,
    cluster: SimCluster,
    policies: Sequence[Policy],
    options: EngineOptions | None = None,
    progress: Callable[[Policy], Callable[[int, int], None] | None] | None = None,
) -> list[SimResult]:
    """Simulate ``workload`` once per policy; same engine options otherwise."""
    base = options or EngineOptions()
    out: list[SimResult] = []
    for p in policies:
        opt = dataclasses.replace(base, config=p.config, label=p.label)
        out.append(simulate(workload, cluster, opt, progress(p) if progress else None))
    return out
