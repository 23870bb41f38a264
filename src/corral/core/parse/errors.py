"""``ParseError``: the one error type of every notation parser in ``corral.core.parse``.

Each error names what was being parsed (``kind``), the exact text that was rejected
(``text``) and why (``reason``), so a front end can print a precise message or map it to its
dialect's wording. ``slurm_message`` carries the phrase Slurm itself prints for that
kind of mistake (``Invalid job array specification``, ``Job dependency problem``,
``Invalid --time specification``) when there is one; the string form of the error always
includes the offending text and the reason.
"""

from __future__ import annotations


class ParseError(ValueError):
    """Bad notation. ``str(err)`` reads like ``invalid time '1:2:3:4:5': too many fields``."""

    def __init__(
        self, kind: str, text: str, reason: str, *, slurm_message: str | None = None
    ) -> None:
        self.kind = kind
        self.text = text
        self.reason = reason
        self.slurm_message = slurm_message
        prefix = f"{slurm_message}: " if slurm_message else ""
        super().__init__(f"{prefix}invalid {kind} {text!r}: {reason}")
