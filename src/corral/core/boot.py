"""Booting nodes in the plan: powered-down nodes are future capacity, not free capacity.

The shell passes ``ClusterSnapshot.boot_ready``: for every node that is powered down, the
time it would be ready if resumed now (now + its boot time); for every node powering up,
the time it is expected to be ready. The pass holds each such node's whole capacity in the
availability profile from now until that time (``passes.state``), so:

- nothing starts on it now (its agent is not there to run anything);
- a job that needs it waits with an estimated start that includes the boot, and backfill
  plans around it like around any reservation;
- under EASY backfill, a job behind the one EASY reservation that waits only for booting
  nodes (its earliest start is no later than the last boot) holds its nodes too, so that
  each waiting job plans on nodes of its own.

``nodes_to_resume`` then says which powered-down nodes the shell should resume: those
that a planned start (a ``Reserve``) needs by the time they would be ready, and no others.
A node planned for a start much later (its reservation waits for running jobs to end) is
not resumed yet: resuming it now would only keep it idle. Pure: time is an argument.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from corral.core.decisions import Reserve


def nodes_to_resume(reservations: Iterable[Reserve], powered_down: Mapping[str, float],
                    now: float, slack_s: float = 1.0) -> list[str]:
    """The nodes of ``powered_down`` (name -> ready time if resumed now) that a
    reservation needs: it starts no later than the node's ready time plus ``slack_s`` (the
    backfill resolution rounds starts up). Sorted, each once."""
    out: set[str] = set()
    for r in reservations:
        for name in r.nodes:
            ready = powered_down.get(name)
            if ready is not None and r.start_time <= max(ready, now) + slack_s:
                out.add(name)
    return sorted(out)
