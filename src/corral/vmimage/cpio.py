"""A writer for the ``newc`` cpio format, the format the Linux kernel unpacks as an
initramfs (``Documentation/driver-api/early-userspace/buffer-format.rst``).

Each entry is a 110-byte ASCII header (magic ``070701``, then 13 fields of 8 hex digits:
ino, mode, uid, gid, nlink, mtime, filesize, devmajor, devminor, rdevmajor, rdevminor,
namesize, check), the NUL-terminated name padded to 4 bytes, then the data padded to 4
bytes; the archive ends with the entry ``TRAILER!!!``. Entries are written in the order
given, so directories must come before what they hold. Everything is owned by root and
dated 0, so the same inputs always give the same bytes.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass

_MAGIC = b"070701"


@dataclass(frozen=True)
class Entry:
    name: str  # path inside the archive, without a leading "/"
    mode: int  # full st_mode (file type bits included)
    data: bytes = b""  # file contents, or the target of a symbolic link
    rdev: tuple[int, int] = (0, 0)  # (major, minor) of a device node


def directory(name: str, perm: int = 0o755) -> Entry:
    return Entry(name, stat.S_IFDIR | perm)


def file(name: str, data: bytes, perm: int = 0o644) -> Entry:
    return Entry(name, stat.S_IFREG | perm, data)


def symlink(name: str, target: str) -> Entry:
    return Entry(name, stat.S_IFLNK | 0o777, target.encode())


def chardev(name: str, major: int, minor: int, perm: int = 0o600) -> Entry:
    return Entry(name, stat.S_IFCHR | perm, b"", (major, minor))


def _pad(n: int) -> bytes:
    return b"\0" * (-n % 4)


def _header(ino: int, entry: Entry) -> bytes:
    name = entry.name.encode() + b"\0"
    nlink = 2 if stat.S_ISDIR(entry.mode) else 1
    fields = (ino, entry.mode, 0, 0, nlink, 0, len(entry.data), 0, 0,
              entry.rdev[0], entry.rdev[1], len(name), 0)
    head = _MAGIC + b"".join(b"%08X" % v for v in fields) + name
    return head + _pad(len(head))


def archive(entries: list[Entry]) -> bytes:
    """The cpio ``newc`` archive of ``entries`` (names must be unique)."""
    seen: set[str] = set()
    out: list[bytes] = []
    for ino, entry in enumerate(entries, start=1):
        if not entry.name or entry.name.startswith("/") or entry.name in seen:
            raise ValueError(f"bad or repeated archive name {entry.name!r}")
        seen.add(entry.name)
        out.append(_header(ino, entry))
        out.append(entry.data + _pad(len(entry.data)))
    out.append(_header(0, Entry("TRAILER!!!", 0)))
    blob = b"".join(out)
    return blob + _pad(len(blob))
