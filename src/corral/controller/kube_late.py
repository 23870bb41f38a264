"""A Volcano job and the companion jobs of its late replicas
(``corral.frontends.volcano_late``) as one Job for kubectl.

A companion carries ``vc_late_of = <root job id>`` in its submission's extra fields; it is
not listed itself. The root's pods take their phases from the steps of all parts (a pod's
step is named after it, whichever part ran it). Phase of the whole: the root's while it
is pending; ``Running`` while any part is active; once every part has ended, ``Aborted``
or ``Terminated`` when one part ended so (an ``AbortJob``/``TerminateJob`` policy or a
cancel), else ``Completed`` when at least ``minSuccess`` (default ``minAvailable``)
replicas succeeded, else ``Failed``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from corral.core.model.job import JobState

if TYPE_CHECKING:
    from corral.controller.records import JobRecord


def root_of(rec: JobRecord) -> int | None:
    got = rec.sub.extra.get("vc_late_of")
    return int(got) if got and str(got).isdigit() else None


def index(recs: Iterable[JobRecord]) -> dict[int, list[JobRecord]]:
    """Root job id -> its companion jobs, in id order."""
    out: dict[int, list[JobRecord]] = {}
    for r in recs:
        root = root_of(r)
        if root is not None:
            out.setdefault(root, []).append(r)
    for parts in out.values():
        parts.sort(key=lambda r: r.id)
    return out


def waiting(parts: list[JobRecord]) -> bool:
    """A part still runs or waits to (a pending companion counts: between the root's end
    and its companion's start the whole job is still Running, not Completed)."""
    return any(not p.state.is_finished for p in parts)


def phase(rec: JobRecord, parts: list[JobRecord], own: str, counts: dict[str, int],
          phase_of: Callable[[JobRecord], str], min_success: int | None) -> str:
    """The whole job's phase; ``phase_of`` gives one ended part's phase, ``min_success``
    is the job's ``minSuccess`` (None or 0: ``minAvailable``)."""
    if rec.state is JobState.PENDING:
        return own
    if rec.state.is_active or waiting(parts):
        return "Running"
    ends = [own] + [phase_of(p) for p in parts]
    for bad in ("Aborted", "Terminated"):
        if bad in ends:
            return bad
    plan_need = int(rec.sub.spec.min_available or 1)
    need = int(min_success or plan_need)
    return "Completed" if counts["succeeded"] >= need else "Failed"
