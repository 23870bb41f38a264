"""Job id words as Slurm commands accept them: ``12``, ``12_3``, ``12_[1-3,7]``, ``12.batch``.

``parse_job_refs`` splits comma lists (keeping commas inside brackets) and returns one
``JobRef`` per word; ``ref_matches`` tells whether a job record is named by a ref, and
``RefIndex`` answers the same for many refs at once (a tool's ``-j`` of 100 ids against
the records it got back: a lookup per record, not a scan of the refs). A bare
number names that job and, when it is an array's id, every task of the array (as
``scancel 12`` and ``squeue -j 12`` do). Anything else raises ``IdError`` naming the word.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class IdError(ValueError):
    def __init__(self, word: str) -> None:
        super().__init__(f"Invalid job id {word}")
        self.word = word


@dataclass(frozen=True, slots=True)
class JobRef:
    word: str
    base: int
    tasks: frozenset[int] | None = None  # None: the job (or the whole array)
    step: str | None = None  # "batch", "extern", "0" ...


def _split_top(text: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            if cur:
                out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    if cur:
        out.append("".join(cur))
    return out


MAX_JOB_ID = 2 ** 63 - 1
MAX_TASK_ID = 4_000_000


def _number(text: str) -> bool:
    """ASCII digits (``str.isdigit`` alone accepts ``¹`` and ``①``), at most 19."""
    return text.isascii() and text.isdigit() and len(text) <= 19


def _task_set(word: str, body: str) -> frozenset[int]:
    tasks: set[int] = set()
    for part in body.split(","):
        part = part.split("%", 1)[0]
        lo, dash, hi = part.partition("-")
        if not _number(lo) or (dash and not _number(hi)):
            raise IdError(word)
        a, b = int(lo), int(hi) if dash else int(lo)
        # no array index reaches Slurm's largest MaxArraySize (4000001): a bigger range
        # names no task and would only build a huge set
        if b < a or b > MAX_TASK_ID:
            raise IdError(word)
        tasks.update(range(a, b + 1))
    return frozenset(tasks)


def parse_job_ref(word: str) -> JobRef:
    text = word.strip()
    step = None
    if "." in text:
        text, _, step = text.partition(".")
        if not step:
            raise IdError(word)
    base_s, us, task_s = text.partition("_")
    if not _number(base_s) or int(base_s) > MAX_JOB_ID:
        raise IdError(word)
    tasks: frozenset[int] | None = None
    if us:
        if task_s.startswith("[") and task_s.endswith("]"):
            tasks = _task_set(word, task_s[1:-1])
        elif _number(task_s) and int(task_s) <= MAX_TASK_ID:
            tasks = frozenset({int(task_s)})
        else:
            raise IdError(word)
    return JobRef(word, int(base_s), tasks, step)


def parse_job_refs(words: list[str]) -> list[JobRef]:
    refs: list[JobRef] = []
    for w in words:
        for part in _split_top(w):
            refs.append(parse_job_ref(part))
    return refs


def ref_matches(ref: JobRef, rec: dict[str, Any]) -> bool:
    aj = rec.get("array_job_id")
    at = rec.get("array_task_id")
    if ref.tasks is None:
        return int(rec["id"]) == ref.base or (aj is not None and int(aj) == ref.base)
    return aj is not None and int(aj) == ref.base and at is not None and int(at) in ref.tasks


class RefIndex:
    """Refs by the job number they name, for asking which refs name a record.

    A ref with base ``b`` can name only a record whose id or array id is ``b``
    (``ref_matches``), so a record is checked against the refs filed under those two
    numbers and no others. ``matching`` keeps the refs' order (``sacct -j`` reads its
    selections in the order given)."""

    def __init__(self, refs: list[JobRef]) -> None:
        self.refs = refs
        self._by_base: dict[int, list[int]] = {}
        for i, ref in enumerate(refs):
            self._by_base.setdefault(ref.base, []).append(i)

    def matching(self, rec: dict[str, Any]) -> list[int]:
        """Indices (ascending) of the refs that name ``rec``."""
        by_base = self._by_base
        jid = int(rec["id"])
        aj = rec.get("array_job_id")
        found = list(by_base.get(jid, ()))
        if aj is not None and int(aj) != jid:
            found.extend(by_base.get(int(aj), ()))
            found.sort()
        refs = self.refs
        return [i for i in found if ref_matches(refs[i], rec)]

    def names(self, rec: dict[str, Any]) -> bool:
        """Whether any ref names ``rec``."""
        return bool(self.matching(rec))


def ref_api_ids(ref: JobRef) -> list[str]:
    """The id strings the controller API takes for this ref (``12``, ``12_3``)."""
    if ref.tasks is None:
        return [str(ref.base)]
    return [f"{ref.base}_{t}" for t in sorted(ref.tasks)]
