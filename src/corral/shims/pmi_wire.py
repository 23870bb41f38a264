"""Wire formats of MPICH's PMI-1 and PMI-2 protocols, and ``PMI_process_mapping``.

PMI-1 ("v1"): one message per line, ``cmd=NAME key=value key=value\\n``; fields are
separated by spaces, so values carry no spaces; a field without ``=`` is kept with an
empty value. PMI-2 ("v2"): a six-byte ASCII decimal length (left-aligned, padded with
spaces), then that many bytes ``cmd=NAME;key=value;...;`` where a ``;`` inside a value is
doubled. A connection starts in v1 (``cmd=init pmi_version=2 ...`` is itself a v1 line)
and switches to v2 after the server accepts version 2.

Nothing here does I/O: :class:`Framer` turns received bytes into messages and
:func:`encode_v1` / :func:`encode_v2` turn replies into bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

V2_LEN_DIGITS = 6
MAX_MESSAGE = 64 * 1024  # far above MPICH's own limits (1024-byte lines, ~4 KiB PMI-2)


class WireError(ValueError):
    """A peer sent something that is not PMI."""


Message = tuple[str, dict[str, str]]


def decode_v1(line: bytes) -> Message:
    """``b"cmd=put kvsname=k key=a value=b"`` -> ``("put", {"kvsname": "k", ...})``."""
    text = line.decode("utf-8", "replace").strip()
    fields: dict[str, str] = {}
    for token in text.split():
        key, _, value = token.partition("=")
        fields.setdefault(key, value)
    cmd = fields.pop("cmd", None)
    if cmd is None:
        # spawn uses mcmd=; anything else without cmd= is not PMI-1
        cmd = fields.pop("mcmd", None)
        if cmd is None:
            raise WireError(f"no cmd= in PMI-1 line {text[:80]!r}")
    return cmd, fields


def encode_v1(cmd: str, fields: dict[str, str] | None = None) -> bytes:
    parts = [f"cmd={cmd}"]
    for key, value in (fields or {}).items():
        # a space would split the value on the client side
        parts.append(f"{key}={value.replace(' ', '_')}")
    return (" ".join(parts) + "\n").encode()


def decode_v2(body: bytes) -> Message:
    """Parse one PMI-2 body (without its length prefix)."""
    text = body.decode("utf-8", "replace")
    fields: dict[str, str] = {}
    cmd: str | None = None
    i, n = 0, len(text)
    while i < n:
        eq = text.find("=", i)
        if eq < 0:
            if text[i:].strip(" \n\r\t;"):
                raise WireError(f"PMI-2 field without '=' in {text[:80]!r}")
            break
        key = text[i:eq]
        j = eq + 1
        value: list[str] = []
        while j < n:
            ch = text[j]
            if ch == ";":
                if j + 1 < n and text[j + 1] == ";":
                    value.append(";")
                    j += 2
                    continue
                break
            value.append(ch)
            j += 1
        if cmd is None:
            if key != "cmd":
                raise WireError(f"PMI-2 message does not start with cmd=: {text[:80]!r}")
            cmd = "".join(value)
        else:
            fields.setdefault(key, "".join(value))
        i = j + 1
    if cmd is None:
        raise WireError("empty PMI-2 message")
    return cmd, fields


def encode_v2(cmd: str, fields: dict[str, str] | None = None) -> bytes:
    body = f"cmd={cmd};" + "".join(
        f"{key}={value.replace(';', ';;')};" for key, value in (fields or {}).items())
    raw = body.encode()
    if len(raw) >= 10 ** V2_LEN_DIGITS:
        raise WireError("PMI-2 message too long")
    return f"{len(raw):<{V2_LEN_DIGITS}d}".encode() + raw


class Framer:
    """Splits a byte stream into PMI messages; ``v2`` switches the framing."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.v2 = False

    def feed(self, data: bytes) -> None:
        self.buf += data

    def next(self) -> Message | None:
        """The next complete message, or None; raises :class:`WireError`."""
        if self.v2:
            if len(self.buf) < V2_LEN_DIGITS:
                return None
            head = bytes(self.buf[:V2_LEN_DIGITS]).strip()
            if not head.isdigit():
                raise WireError(f"bad PMI-2 length {head[:V2_LEN_DIGITS]!r}")
            size = int(head)
            if size > MAX_MESSAGE:
                raise WireError("PMI-2 message too long")
            if len(self.buf) < V2_LEN_DIGITS + size:
                return None
            body = bytes(self.buf[V2_LEN_DIGITS:V2_LEN_DIGITS + size])
            del self.buf[:V2_LEN_DIGITS + size]
            return decode_v2(body)
        end = self.buf.find(b"\n")
        if end < 0:
            if len(self.buf) > MAX_MESSAGE:
                raise WireError("PMI-1 line too long")
            return None
        line = bytes(self.buf[:end])
        del self.buf[:end + 1]
        if not line.strip():
            return self.next()
        return decode_v1(line)


def process_mapping(rank_node: Sequence[int]) -> str:
    """MPICH's ``(vector,(start,count,ppn),...)`` text for a rank -> node index list.

    Each triple gives ``ppn`` consecutive ranks to each of ``count`` nodes starting at
    node ``start``; when the triples run out before the ranks, MPICH starts over from the
    first triple. That repetition is used to keep cyclic layouts short: the shortest
    prefix of triples whose repetition reproduces the whole layout is emitted.
    """
    if not rank_node:
        return "(vector)"
    runs: list[list[int]] = []  # [node, length]
    for node in rank_node:
        if runs and runs[-1][0] == node:
            runs[-1][1] += 1
        else:
            runs.append([node, 1])
    triples: list[list[int]] = []  # [start, count, ppn]
    for node, length in runs:
        last = triples[-1] if triples else None
        if last is not None and last[2] == length and last[0] + last[1] == node:
            last[1] += 1
        else:
            triples.append([node, 1, length])
    covered = 0
    for k, (_start, count, ppn) in enumerate(triples):
        covered += count * ppn
        if all(rank_node[i] == rank_node[i - covered]
               for i in range(covered, len(rank_node))):
            triples = triples[:k + 1]
            break
    return "(vector," + ",".join(f"({s},{c},{p})" for s, c, p in triples) + ")"


def block_layout(tasks_per_node: Sequence[int]) -> list[int]:
    """Rank -> node index for block placement (ranks fill node 0, then node 1, ...)."""
    return [node for node, count in enumerate(tasks_per_node) for _ in range(count)]


def cyclic_layout(tasks_per_node: Sequence[int]) -> list[int]:
    """Rank -> node index for cyclic placement (one rank per node in turn)."""
    left = list(tasks_per_node)
    out: list[int] = []
    while any(left):
        for node, count in enumerate(left):
            if count:
                out.append(node)
                left[node] -= 1
    return out
