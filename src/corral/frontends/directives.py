"""Batch-script directives: the option words written on ``#SBATCH`` / ``#PBS`` lines.

Rules (Slurm ``src/sbatch/opt.c`` ``_opt_batch_script``/``_get_argument``; qsub follows
the same shape):

- a directive line starts in column one with the prefix (``#SBATCH``; Slurm also takes
  the deprecated ``#SLURM``); the words after it are options, exactly as on the command
  line, and several options may share one line;
- words split on whitespace; ``'...'`` and ``"..."`` group (the quotes are removed); a
  backslash escapes the next character; an unquoted ``#`` starts a comment;
- scanning stops at the first line that is neither blank nor a comment (a shell command),
  so ``#SBATCH`` lines after the first command are ignored, as in sbatch;
- an unmatched quote is an error naming the line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class DirectiveError(ValueError):
    def __init__(self, message: str, lineno: int) -> None:
        super().__init__(message)
        self.message = message
        self.lineno = lineno


@dataclass(frozen=True, slots=True)
class DirectiveLine:
    lineno: int  # 1-based
    text: str  # the whole line as written
    words: tuple[str, ...]


def split_words(text: str, *, where: str = "", lineno: int = 0) -> list[str]:
    """Split directive text into words with Slurm's quoting rules."""
    words: list[str] = []
    cur: list[str] = []
    in_word = False
    quote: str | None = None
    escape = False
    for ch in text:
        if escape:
            cur.append(ch)
            in_word = True
            escape = False
            continue
        if ch == "\\":
            escape = True
            in_word = True
            continue
        if quote is not None:
            if ch == quote:
                quote = None
            else:
                cur.append(ch)
            continue
        if ch in "\"'":
            quote = ch
            in_word = True
            continue
        if ch == "#":
            break
        if ch.isspace():
            if in_word:
                words.append("".join(cur))
                cur = []
                in_word = False
            continue
        cur.append(ch)
        in_word = True
    if quote is not None:
        raise DirectiveError(
            f"{where}line {lineno}: Unmatched `{quote}` in [{text.strip()}]", lineno
        )
    if in_word:
        words.append("".join(cur))
    return words


def directive_lines(
    script: str, prefixes: Sequence[str] = ("#SBATCH",), *, where: str = ""
) -> list[DirectiveLine]:
    """The directive lines of ``script`` before its first command, with their words."""
    out: list[DirectiveLine] = []
    for lineno, raw in enumerate(script.splitlines(), start=1):
        line = raw.rstrip("\r")
        if lineno == 1 and line.startswith("#!"):
            continue
        prefix = next((p for p in prefixes if line.startswith(p)), None)
        if prefix is not None:
            words = split_words(line[len(prefix) :], where=where, lineno=lineno)
            out.append(DirectiveLine(lineno, line, tuple(words)))
            continue
        stripped = line.lstrip()
        if stripped and not stripped.startswith("#"):
            break  # first command: directives end here
    return out


def directive_words(
    script: str, prefixes: Sequence[str] = ("#SBATCH",), *, where: str = ""
) -> list[str]:
    """All directive words of ``script`` in order, as one argument vector."""
    words: list[str] = []
    for d in directive_lines(script, prefixes, where=where):
        words.extend(d.words)
    return words
