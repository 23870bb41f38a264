"""PBS Pro (OpenPBS) conventions shared by ``qsub``, ``qstat`` and ``qdel``.

- job ids print as ``<seq>.<server>``; an array as ``<seq>[].<server>`` and its subjobs
  as ``<seq>[<index>].<server>``; commands accept every id with or without the server
  suffix (dask-jobqueue sends the bare number, Parsl and Nextflow the full id);
- ``<server>`` is the controller's short host name;
- states: ``Q`` queued, ``H`` held, ``W`` waiting for its start time, ``R`` running,
  ``E`` exiting, ``F`` finished (``X`` for a finished subjob), ``B`` array with a running
  subjob; exit codes follow PBS: unknown id 153 (``PBSE_UNKJOBID``), finished id without
  ``-x`` 35 (``PBSE_HISTJOBID``).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

from corral.shims import slurmfmt as sf

Record = dict[str, Any]
EXIT_UNKNOWN = 15001 & 0xFF  # 153
EXIT_HISTORY = 15139 & 0xFF  # 35
PBS_VERSION = "23.06.06"


def server_name() -> str:
    return socket.gethostname().split(".")[0] or "localhost"


class PbsIdError(ValueError):
    def __init__(self, word: str) -> None:
        super().__init__(word)
        self.word = word


@dataclass(frozen=True, slots=True)
class PbsRef:
    word: str
    seq: int
    array: bool = False  # "123[]"
    index: int | None = None  # "123[7]"
    server: str | None = None


def parse_pbs_id(word: str) -> PbsRef:
    text = word.strip()
    if text.startswith("@"):
        raise PbsIdError(word)
    head, dot, server = text.partition(".")
    array = False
    index: int | None = None
    if "[" in head:
        base, _, rest = head.partition("[")
        if not rest.endswith("]"):
            raise PbsIdError(word)
        inner = rest[:-1]
        if inner == "":
            array = True
        elif inner.isascii() and inner.isdigit() and len(inner) <= 9:
            index = int(inner)
        else:
            raise PbsIdError(word)
        head = base
    if not (head.isascii() and head.isdigit() and len(head) <= 18):
        raise PbsIdError(word)
    return PbsRef(word, int(head), array, index, server if dot else None)


def ref_matches(ref: PbsRef, rec: Record) -> bool:
    aj = rec.get("array_job_id")
    at = rec.get("array_task_id")
    if ref.index is not None:
        return aj is not None and int(aj) == ref.seq and at is not None and int(at) == ref.index
    return int(rec["id"]) == ref.seq or (aj is not None and int(aj) == ref.seq)


def api_ids(ref: PbsRef) -> list[str]:
    if ref.index is not None:
        return [f"{ref.seq}_{ref.index}"]
    return [str(ref.seq)]


def job_id_text(rec: Record, server: str, *, subjob: bool = True) -> str:
    if sf.is_array(rec):
        aj = sf.array_job_id(rec)
        if subjob:
            return f"{aj}[{rec['array_task_id']}].{server}"
        return f"{aj}[].{server}"
    return f"{rec['id']}.{server}"


def state_letter(rec: Record, *, subjob: bool = False) -> str:
    state = sf.job_state(rec)
    if state == "PENDING":
        if rec.get("hold") not in (None, "NONE"):
            return "H"
        if sf.reason(rec) == "BeginTime":
            return "W"
        return "Q"
    if state in ("RUNNING",):
        return "R"
    if state == "SUSPENDED":
        return "S"
    if state == "COMPLETING":
        return "E"
    return "X" if subjob else "F"


def array_state(members: list[Record]) -> str:
    letters = [state_letter(m, subjob=True) for m in members]
    if any(x in ("R", "E", "S") for x in letters) or (
        any(x == "X" for x in letters) and any(x in ("Q", "H", "W") for x in letters)
    ):
        return "B"
    if all(x == "X" for x in letters):
        return "F"
    if all(x == "H" for x in letters):
        return "H"
    return "Q"


def group_arrays(records: list[Record]) -> list[tuple[Record, list[Record]]]:
    """(representative, members) per job; an array's members are all its tasks."""
    out: list[tuple[Record, list[Record]]] = []
    arrays: dict[int, list[Record]] = {}
    for r in records:
        if sf.is_array(r):
            aj = sf.array_job_id(r)
            members = arrays.get(aj)
            if members is None:
                arrays[aj] = members = []
                out.append((r, members))
            members.append(r)
        else:
            out.append((r, [r]))
    return out


def hms(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"
