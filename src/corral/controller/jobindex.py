"""In-memory indexes of the controller's job table by user and by job name.

Status queries (``squeue -u``, ``squeue --name``, ``GET /jobs?user=``) look up the ids
of one user's or one name's jobs here instead of scanning every active job: the cost of a
poll is the size of its answer, not of the queue. The index covers exactly the records in
``Controller.jobs`` (active and recently finished): ``add`` when a record enters it,
``remove`` when it is pruned, ``rename`` when an update changes a job's name.
Invariant: ``id in by_user[u]`` iff the record with that id is in the table and its user
is ``u`` (the same for names).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from corral.controller.records import JobRecord


class JobIndex:
    def __init__(self) -> None:
        self.by_user: dict[str, set[int]] = {}
        self.by_name: dict[str, set[int]] = {}

    def add(self, rec: JobRecord) -> None:
        self.by_user.setdefault(rec.user, set()).add(rec.id)
        self.by_name.setdefault(rec.sub.spec.name, set()).add(rec.id)

    def remove(self, rec: JobRecord) -> None:
        _discard(self.by_user, rec.user, rec.id)
        _discard(self.by_name, rec.sub.spec.name, rec.id)

    def rename(self, rec: JobRecord, old_name: str) -> None:
        if old_name != rec.sub.spec.name:
            _discard(self.by_name, old_name, rec.id)
            self.by_name.setdefault(rec.sub.spec.name, set()).add(rec.id)

    def ids(self, user: str | None, name: str | None) -> set[int] | None:
        """The ids of the jobs of ``user`` and named ``name`` (either may be None), or
        None when neither is given (no index applies)."""
        if user is None and name is None:
            return None
        found: set[int] | None = None
        for table, key in ((self.by_user, user), (self.by_name, name)):
            if key is None:
                continue
            ids = table.get(key, set())
            found = set(ids) if found is None else found & ids
        return found


def _discard(table: dict[str, set[int]], key: str, jid: int) -> None:
    ids = table.get(key)
    if ids is not None:
        ids.discard(jid)
        if not ids:
            del table[key]
