"""Which rows ``sacct -j`` prints: Slurm 22.05's job and step selection.

A word is ``<job>[_<task>][.<step>]`` (``ids.parse_job_refs``: comma lists, array tasks
``12_3`` and ``12_[1-3]``), the step ``batch``, ``extern``, ``interactive`` or a number
(Slurm's ``slurm_parse_step_str``: leading digits, ``5.03`` is step 3); any other step is
``sacct: fatal: Bad step specified: <job>``, exit 1.

For each job, the selections naming it are read in the order given, as slurmdbd does
(``as_mysql_jobacct_process.c``): one without a step shows the job's own row and stops
the reading; one with a step adds that step to those shown and hides the job's row. So
``-j 5`` prints the job and all its steps, ``-j 5.3`` only step 3, ``-j 5.batch`` only
the batch step, ``-j 5.3,5`` the job and step 3 (Slurm stops at ``5`` with the step list
it has), ``-j 5,5.3`` the job and all its steps. A step the job does not have prints
nothing. With ``-X`` steps are never read: each selected job prints its own row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from corral.shims.ids import JobRef, RefIndex, parse_job_refs

NAMED_STEPS = ("batch", "extern", "interactive")


class StepError(ValueError):
    """A step part Slurm refuses; ``job`` is the word before the dot (Slurm's message)."""

    def __init__(self, job: str) -> None:
        super().__init__(f"Bad step specified: {job}")
        self.job = job


@dataclass(frozen=True, slots=True)
class Selection:
    ref: JobRef
    step: str | None  # None: the whole job; else "batch", "extern", "interactive", "<n>"


def step_id(text: str, job: str) -> str:
    """A step word as Slurm reads it: a named step, else its leading digits as a number."""
    if text in NAMED_STEPS:
        return text
    digits = ""
    for ch in text:
        if not ("0" <= ch <= "9"):
            break
        digits += ch
    if not digits or len(digits) > 10:
        raise StepError(job)
    return str(int(digits))


def parse_selections(words: list[str]) -> list[Selection]:
    """``-j`` values -> selections (raises ``ids.IdError`` or ``StepError``)."""
    out: list[Selection] = []
    for ref in parse_job_refs(words):
        step = None if ref.step is None else step_id(ref.step, ref.word.partition(".")[0])
        out.append(Selection(ref, step))
    return out


def selection_index(selections: list[Selection]) -> RefIndex:
    """The selections' refs, indexed for ``choose``."""
    return RefIndex([sel.ref for sel in selections])


def choose(selections: list[Selection], rec: dict[str, Any],
           index: RefIndex | None = None) -> tuple[bool, set[str] | None]:
    """(whether the job's own row shows, the step ids shown: None for all) for one job
    record; no selections: the row and all steps. ``index`` (``selection_index`` of the
    same selections) finds the selections naming the record without reading them all."""
    steps: set[str] = set()
    show = True
    idx = index if index is not None else selection_index(selections)
    for i in idx.matching(rec):
        sel = selections[i]
        if sel.step is None:
            return True, steps or None
        steps.add(sel.step)
        show = False
    return show, steps if not show else None
