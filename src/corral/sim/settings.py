"""Scheduler settings of a simulation: command-line overrides and the report's header line.

``corral sim run``/``compare`` take every knob of ``corral.core.config.SchedulerConfig``
that means something for a trace replay (backfill window, depth, resolution and
continuation, the main pass's job cap, reservation policy, fair-share algorithm and
half-life, priority weights and max age, the default time limit, the starvation guard).
``override`` applies the ones given on top of a base configuration (the cluster's
``[scheduler]`` or the defaults);
``describe`` prints the resulting values on one line for the report header, and
``as_dict`` records them in the JSON summary.

Units follow Slurm: ``--bf-window`` and the other durations take Slurm time strings
(``90`` is 90 minutes, ``1-0`` a day, ``0:30`` 30 seconds); ``--bf-resolution`` takes
seconds as Slurm's ``bf_resolution`` does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from corral.core.config import FairshareAlgorithm, ReservationPolicy, SchedulerConfig
from corral.core.parse.timefmt import parse_time_s

_WEIGHT_KEYS = ("age", "fairshare", "job_size", "partition", "qos", "assoc")


class SettingsError(ValueError):
    pass


def _duration(option: str, text: str, *, allow_zero: bool = False) -> int:
    try:
        seconds = parse_time_s(text)
    except ValueError as exc:
        raise SettingsError(f"{option} {text!r}: {exc}") from None
    if seconds is None or seconds < 0 or (seconds == 0 and not allow_zero):
        raise SettingsError(f"{option} {text!r}: give a positive duration (e.g. 90, 1-0)")
    return seconds


def _weights(cfg: SchedulerConfig, text: str) -> SchedulerConfig:
    changes: dict[str, object] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        key, eq, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or key not in _WEIGHT_KEYS:
            raise SettingsError(f"--priority-weights {text!r}: use KEY=N with KEY one of "
                                f"{', '.join(_WEIGHT_KEYS)} (e.g. age=1000,fairshare=0)")
        if not value.strip().isdigit() or not value.strip().isascii():
            raise SettingsError(f"--priority-weights {item!r}: the weight must be a "
                                f"non-negative whole number")
        changes[key] = int(value)
    return dataclasses.replace(cfg, weights=dataclasses.replace(cfg.weights, **changes))  # type: ignore[arg-type]


def override(
    cfg: SchedulerConfig,
    *,
    bf_resolution_s: int | None = None,
    bf_window: str | None = None,
    bf_max_job_test: int | None = None,
    bf_continue: bool | None = None,
    max_jobs_per_cycle: int | None = None,
    reservation_policy: str | None = None,
    fairshare_algorithm: str | None = None,
    decay_half_life: str | None = None,
    priority_weights: str | None = None,
    priority_max_age: str | None = None,
    favor_small: bool | None = None,
    default_time: str | None = None,
    starvation_guard: str | None = None,
) -> SchedulerConfig:
    """``cfg`` with the given settings replaced; ``SettingsError`` names a bad one."""
    changes: dict[str, object] = {}
    if bf_resolution_s is not None:
        if bf_resolution_s < 1:
            raise SettingsError(f"--bf-resolution {bf_resolution_s}: at least 1 second")
        changes["bf_resolution_s"] = bf_resolution_s
    if bf_window is not None:
        changes["bf_window_s"] = _duration("--bf-window", bf_window)
    if bf_max_job_test is not None:
        if bf_max_job_test < 1:
            raise SettingsError(f"--bf-max-job-test {bf_max_job_test}: at least 1")
        changes["bf_max_job_test"] = bf_max_job_test
    if bf_continue is not None:
        changes["bf_continue"] = bf_continue
    if max_jobs_per_cycle is not None:
        if max_jobs_per_cycle < 0:
            raise SettingsError(f"--max-jobs-per-cycle {max_jobs_per_cycle}: 0 (no cap) "
                                f"or more")
        changes["max_jobs_per_cycle"] = max_jobs_per_cycle or None
    if reservation_policy is not None:
        try:
            changes["reservation_policy"] = ReservationPolicy(reservation_policy.lower())
        except ValueError:
            raise SettingsError(
                f"--reservation-policy {reservation_policy!r}: use "
                f"{' or '.join(p.value for p in ReservationPolicy)}") from None
    if fairshare_algorithm is not None:
        try:
            changes["fairshare"] = FairshareAlgorithm(fairshare_algorithm.lower())
        except ValueError:
            raise SettingsError(
                f"--fairshare-algorithm {fairshare_algorithm!r}: use "
                f"{' or '.join(p.value for p in FairshareAlgorithm)}") from None
    if decay_half_life is not None:
        changes["decay_half_life_s"] = _duration("--decay-half-life", decay_half_life)
    if default_time is not None:
        changes["default_time_s"] = _duration("--default-time", default_time)
    if starvation_guard is not None:
        changes["starvation_guard_s"] = (None if starvation_guard.lower() in ("none", "off")
                                         else _duration("--starvation-guard",
                                                        starvation_guard))
    out = dataclasses.replace(cfg, **changes)  # type: ignore[arg-type]
    if priority_weights is not None:
        out = _weights(out, priority_weights)
    wchanges: dict[str, object] = {}
    if priority_max_age is not None:
        wchanges["max_age_s"] = _duration("--priority-max-age", priority_max_age)
    if favor_small is not None:
        wchanges["favor_small"] = favor_small
    if wchanges:
        out = dataclasses.replace(out, weights=dataclasses.replace(out.weights, **wchanges))  # type: ignore[arg-type]
    return out


def as_dict(cfg: SchedulerConfig) -> dict[str, Any]:
    """The replay-relevant settings, JSON-ready (enums as their values)."""
    w = cfg.weights
    return {
        "bf_resolution_s": cfg.bf_resolution_s, "bf_window_s": cfg.bf_window_s,
        "bf_max_job_test": cfg.bf_max_job_test, "bf_continue": cfg.bf_continue,
        "max_jobs_per_cycle": cfg.max_jobs_per_cycle,
        "reservation_policy": cfg.reservation_policy.value,
        "fairshare": cfg.fairshare.value, "decay_half_life_s": cfg.decay_half_life_s,
        "default_time_s": cfg.default_time_s,
        "starvation_guard_s": cfg.starvation_guard_s,
        "weights": {k: getattr(w, k) for k in _WEIGHT_KEYS}
        | {"max_age_s": w.max_age_s, "favor_small": w.favor_small},
    }


def _dur(seconds: int) -> str:
    if seconds % 86400 == 0:
        return f"{seconds // 86400}d"
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0:
        return f"{seconds // 60}m"
    return f"{seconds}s"


def describe(settings: Mapping[str, Any]) -> str:
    """One header line: ``bf_resolution=60s bf_window=1d ... weights age=1000 ...``."""
    s = settings
    w = s["weights"]
    cap = s["max_jobs_per_cycle"]
    parts = [
        f"bf_resolution={s['bf_resolution_s']}s", f"bf_window={_dur(s['bf_window_s'])}",
        f"bf_max_job_test={s['bf_max_job_test']}",
        f"bf_continue={'yes' if s['bf_continue'] else 'no'}",
        f"max_jobs_per_cycle={cap if cap else 'all'}",
        f"reservation_policy={s['reservation_policy']}",
        f"fairshare={s['fairshare']}", f"decay_half_life={_dur(s['decay_half_life_s'])}",
        f"default_time={_dur(s['default_time_s'])}",
        "starvation_guard=" + ("off" if s.get("starvation_guard_s") is None
                               else _dur(s["starvation_guard_s"])),
        "weights " + ",".join(f"{k}={w[k]}" for k in _WEIGHT_KEYS)
        + f" max_age={_dur(w['max_age_s'])} favor_small={'yes' if w['favor_small'] else 'no'}",
    ]
    return " ".join(parts)
