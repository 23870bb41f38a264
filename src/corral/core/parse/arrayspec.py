"""Job array specifications (``sbatch --array``, ``qsub -J``): ``1-10:2%4``.

Grammar (Slurm)::

    spec  := list ('%' LIMIT)?
    list  := item (',' item)*
    item  := N | N '-' M (':' STEP)?        -- 0 <= N <= M, STEP >= 1, LIMIT >= 1

Indices are de-duplicated and sorted ascending (Slurm keeps them in a bitmap). Slurm's
``MaxArraySize`` bounds the index, not the count: every index must be below it
(``MaxArraySize=1001`` allows 0..1000). Every bad spec raises ``ParseError`` carrying
Slurm's message ``Invalid job array specification`` and the precise reason.

PBS Pro's ``qsub -J X-Y[:Z][%L]`` is the same shape (one range), so ``parse_array`` serves
both front ends.
"""

from __future__ import annotations

from dataclasses import dataclass

from corral.core.parse.errors import ParseError

SLURM_ARRAY_MSG = "Invalid job array specification"


@dataclass(frozen=True, slots=True)
class ArraySpec:
    indices: tuple[int, ...]
    max_running: int | None = None  # '%' limit: tasks of this array running at once


def _err(text: str, reason: str) -> ParseError:
    return ParseError("array spec", text, reason, slurm_message=SLURM_ARRAY_MSG)


def _number(text: str, s: str, what: str) -> int:
    if not s:
        raise _err(text, f"missing {what}")
    if not (s.isdigit() and s.isascii()):
        raise _err(text, f"{what} {s!r} is not a non-negative whole number")
    return int(s)


def parse_array(text: str, *, max_array_size: int | None = None) -> ArraySpec:
    """Indices and concurrency limit of an array spec.

    ``parse_array("1-10:2%4") == ArraySpec((1, 3, 5, 7, 9), 4)``. With ``max_array_size``
    every index must be below it (Slurm's ``MaxArraySize``).
    """
    s = text.strip()
    if not s:
        raise _err(text, "empty specification")
    body, pct, limit_s = s.partition("%")
    limit: int | None = None
    if pct:
        limit = _number(text, limit_s, "limit after '%'")
        if limit < 1:
            raise _err(text, "the '%' limit must be at least 1")
    if not body:
        raise _err(text, "no indices before '%'")
    # Collect (lo, hi, step) items first; bound the total before building anything big.
    items: list[tuple[int, int, int]] = []
    for part in body.split(","):
        rng, colon, step_s = part.partition(":")
        lo_s, dash, hi_s = rng.partition("-")
        lo = _number(text, lo_s, "index")
        hi = _number(text, hi_s, "end of range") if dash else lo
        step = _number(text, step_s, "step after ':'") if colon else 1
        if colon and not dash:
            raise _err(text, f"a step needs a range (N-M:STEP), got {part!r}")
        if step < 1:
            raise _err(text, f"step in {part!r} must be at least 1")
        if hi < lo:
            raise _err(text, f"range {rng!r} runs backwards")
        if max_array_size is not None and hi >= max_array_size:
            raise _err(
                text, f"index {hi} is not below the maximum array size {max_array_size}"
            )
        items.append((lo, hi, step))
    if max_array_size is None:
        total = sum((hi - lo) // step + 1 for lo, hi, step in items)
        if total > 10_000_000:
            raise _err(text, f"{total} tasks is more than any cluster can take")
    indices: set[int] = set()
    for lo, hi, step in items:
        indices.update(range(lo, hi + 1, step))
    return ArraySpec(tuple(sorted(indices)), limit)


def format_array(indices: tuple[int, ...] | list[int], max_running: int | None = None) -> str:
    """Compact form as squeue prints pending tasks: ``3-6%2``, ``1,3,5-7``."""
    vals = sorted(set(indices))
    runs: list[str] = []
    i = 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        runs.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    out = ",".join(runs)
    return f"{out}%{max_running}" if max_running is not None else out
