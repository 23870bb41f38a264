"""The RLScheduler (SC'20) heuristic table, every cell: what ``corral sim rlscheduler`` runs.

For each trace (Lublin-1, SDSC-SP2, HPC2N, Lublin-2 by default), each mode (without and
with "backfilling") and each heuristic (FCFS, WFP3, UNI, SJF, F1), a cell holds the
published means (Tables V and VI: bounded slowdown and utilization), and per sequence
and averaged the two routes of ``corral.sim.baselines``:

* ``compat``: the authors' loop, which reproduces the published numbers;
* ``core``: the general scheduling core through the engine (strict priority with
  persistent reservations without backfilling, textbook EASY with it).

The sequences are the paper's: ``count`` sequences of ``length`` jobs drawn with the
authors' RNG protocol from ``seed`` (``corral.sim.rlscheduler.sequence_starts``), with
``batch_job_slice = 10,000`` for SDSC-SP2 and HPC2N and the whole file for the Lublin
traces, as ``make_table_script.py`` runs them; each sequence is replayed on an empty
machine. Metrics are the authors': mean bounded slowdown with tau = 10 s and utilization
``sum(run * procs) / ((t_last_start - first_submit) * MaxProcs)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.sim import baselines as bl
from corral.sim.rlscheduler import RlsWorkload, load_workload
from corral.sim.swf import read_swf

MODES = ((False, "no backfilling"), (True, "backfilling"))


@dataclass(frozen=True)
class TableSpec:
    """What to run: traces by name (file names in ``bl.TRACES``) and the sampling."""

    traces: tuple[str, ...] = tuple(bl.TRACES)
    heuristics: tuple[str, ...] = bl.HEURISTICS
    count: int = 10
    length: int = 1024
    seed: int = 1
    core: bool = True


def _route(cells: bl.CellResult) -> dict[str, Any]:
    return {
        "bsld": cells.mean_bsld, "utilization": cells.mean_utilization,
        "wait_s": cells.mean_wait_s,
        "per_sequence": {"bsld": list(cells.bsld), "utilization": list(cells.utilization),
                         "wait_s": list(cells.wait_s)},
    }


def load_traces(trace_dir: Path, names: Sequence[str],
                files: Mapping[str, str] | None = None) -> dict[str, RlsWorkload]:
    """Each named trace as the authors read it; ``files`` overrides ``bl.TRACES``."""
    table = {**bl.TRACES, **(files or {})}
    out: dict[str, RlsWorkload] = {}
    for name in names:
        if name not in table:
            raise ValueError(f"unknown trace {name!r}; the paper's are {', '.join(bl.TRACES)}")
        out[name] = load_workload(read_swf(trace_dir / table[name]))
    return out


def run_table(workloads: Mapping[str, RlsWorkload], spec: TableSpec,
              tick: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Every cell, in the paper's order (mode, trace, heuristic)."""
    starts = {name: bl.paper_starts(wl, name, count=spec.count, length=spec.length,
                                    seed=spec.seed)
              for name, wl in workloads.items()}
    rows: list[dict[str, Any]] = []
    for backfill, mode in MODES:
        for name, wl in workloads.items():
            for pol in spec.heuristics:
                pub = bl.PUBLISHED.get((name, backfill), {}).get(pol)
                published = None
                if pub is not None and (spec.count, spec.length, spec.seed) == (10, 1024, 1):
                    published = {"bsld": pub[0], "utilization": pub[1]}
                compat = bl.compat_cells(wl, pol, backfill=backfill, starts=starts[name],
                                         length=spec.length)
                core = (bl.core_cells(wl, pol, backfill=backfill, starts=starts[name],
                                      length=spec.length) if spec.core else None)
                rows.append({
                    "trace": name, "mode": mode, "backfill": backfill, "policy": pol,
                    "starts": starts[name], "length": spec.length,
                    "published": published, "compat": _route(compat),
                    "core": None if core is None else _route(core),
                })
                if tick:
                    tick(f"{name} {mode} {pol}")
    return rows

