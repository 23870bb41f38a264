"""Write a simulated schedule back as SWF, so it can be inspected or replayed again.

Each simulated job keeps its trace fields (user, group, queue, memory, ...) and gets the
simulated wait (``start - submit``), run (``end - start``) and status (1 completed,
0 killed at its limit or preempted, 5 rejected or never started, as SWF's status codes).
The header records the source trace and the policy.
"""

from __future__ import annotations

import numpy as np

from corral.sim.result import COMPLETED, SimResult
from corral.sim.swf import COL, SwfHeader, SwfTrace


def schedule_trace(res: SimResult, source: SwfTrace | None = None) -> SwfTrace:
    wl = res.workload
    n = len(wl)
    if source is not None:
        data = source.data[wl.row].copy()
        lines = [ln for ln in source.header.lines]
    else:
        data = np.full((n, 18), -1.0)
        lines = []
    data[:, COL["job_id"]] = wl.job_id
    data[:, COL["submit_s"]] = wl.submit_s
    started = res.started
    data[:, COL["wait_s"]] = np.where(started, res.start_s - wl.submit_s, -1.0)
    ended = started & ~np.isnan(res.end_s)
    data[:, COL["run_s"]] = np.where(ended, res.end_s - res.start_s, -1.0)
    data[:, COL["procs_alloc"]] = np.where(started, res.alloc_cpus, -1)
    data[:, COL["procs_req"]] = wl.procs
    data[:, COL["time_req_s"]] = wl.limit_s
    status = np.where(res.state == COMPLETED, 1, np.where(ended, 0, 5))
    data[:, COL["status"]] = status
    extra = [
        f"; Corral simulation: policy {res.label}; {res.settings.get('machine', '')}",
        f"; Corral simulation settings: {res.settings}",
    ]
    header = SwfHeader.parse(lines + extra if lines else
                             [f"; MaxNodes: {res.total_nodes}", f"; MaxProcs: {res.total_cpus}",
                              *extra])
    return SwfTrace(header, data, source.source if source else "")
