"""``SubmitError``: a rejected submission, with the exact text and exit status to use.

``message`` is what the command prints on stderr, already prefixed the way the dialect
prints it (``sbatch: error: Invalid --time specification``), one line per line;
``exit_code`` is the status the real command exits with (255 for Slurm's ``exit(-1)``).
"""

from __future__ import annotations


class SubmitError(Exception):
    """Bad input for a submission command. ``str(err)`` is ``message``."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code

    def __repr__(self) -> str:
        return f"SubmitError({self.message!r}, exit_code={self.exit_code})"
