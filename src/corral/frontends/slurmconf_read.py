"""Read ``slurm.conf`` syntax: ``Key=Value`` pairs, comments, continuations, includes.

slurm.conf(5): case-insensitive keys, several pairs per line; ``#`` starts a comment
(``\\#`` is a literal ``#``); a trailing ``\\`` continues the line; double quotes group a
value with spaces; ``include FILE`` (relative to the including file's directory, globs
allowed, nested up to 16 deep). Each non-empty line becomes a ``ConfLine`` that remembers
its file and line number, so every message can point at the source, and an ``Unmapped``
names such a line when a translation (``slurmconf``, ``ociconf``) has no Corral equivalent.
"""

from __future__ import annotations

import glob
import posixpath
from collections.abc import Callable
from dataclasses import dataclass


class SlurmConfError(ValueError):
    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(f"{where}: {message}" if where else message)
        self.message = message
        self.where = where


@dataclass(frozen=True, slots=True)
class ConfLine:
    file: str
    lineno: int
    pairs: tuple[tuple[str, str], ...]  # (key as written, value), in order

    @property
    def where(self) -> str:
        return f"{self.file}:{self.lineno}"


@dataclass(frozen=True, slots=True)
class Unmapped:
    where: str  # file:line
    key: str
    value: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.key}={self.value}: {self.reason}"


def _split_pairs(text: str, where: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            break
        start = i
        while i < n and text[i] != "=" and not text[i].isspace():
            i += 1
        key = text[start:i]
        if i >= n or text[i] != "=":
            raise SlurmConfError(f"expected Key=Value, got {key!r}", where)
        i += 1
        value_chars: list[str] = []
        if i < n and text[i] == '"':
            i += 1
            while i < n and text[i] != '"':
                value_chars.append(text[i])
                i += 1
            if i >= n:
                raise SlurmConfError(f"unterminated quote in value of {key}", where)
            i += 1
        else:
            while i < n and not text[i].isspace():
                value_chars.append(text[i])
                i += 1
        pairs.append((key, "".join(value_chars)))
    return pairs


def _strip_comment(line: str) -> str:
    out: list[str] = []
    quoted = False
    prev = ""
    for ch in line:
        if ch == '"':
            quoted = not quoted
        if ch == "#" and not quoted and prev != "\\":
            break
        out.append(ch)
        prev = ch
    return "".join(out).replace("\\#", "#")


def read_conf(
    path: str,
    read_text: Callable[[str], str] | None = None,
    *,
    _depth: int = 0,
) -> list[ConfLine]:
    """Parse ``path`` (and its includes) into lines of pairs."""
    if _depth > 16:
        raise SlurmConfError("include nesting deeper than 16 (a cycle?)", path)
    reader = read_text or _read_file
    try:
        text = reader(path)
    except OSError as exc:
        raise SlurmConfError(f"cannot read: {exc.strerror or exc}", path) from None
    out: list[ConfLine] = []
    pending = ""
    pending_no = 0
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = _strip_comment(raw).rstrip()
        if pending:
            line = pending + " " + line.lstrip()
            lineno = pending_no
        if line.endswith("\\"):
            pending, pending_no = line[:-1], lineno
            continue
        pending = ""
        body = line.strip()
        if not body:
            continue
        where = f"{path}:{lineno}"
        first, _, rest = body.partition(" ")
        if first.lower() == "include":
            target = rest.strip().strip('"')
            if not target:
                raise SlurmConfError("include without a file name", where)
            if not target.startswith("/"):
                target = posixpath.join(posixpath.dirname(path), target)
            matches = sorted(glob.glob(target)) if any(c in target for c in "*?[") else [target]
            for m in matches:
                out.extend(read_conf(m, read_text, _depth=_depth + 1))
            continue
        out.append(ConfLine(path, lineno, tuple(_split_pairs(body, where))))
    return out


def _read_file(path: str) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return f.read()
