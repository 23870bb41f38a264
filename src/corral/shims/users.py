"""User names and uids for ``-u`` filters (``squeue -u alice,1001``)."""

from __future__ import annotations

import pwd


class UserError(ValueError):
    def __init__(self, word: str) -> None:
        super().__init__(f"Invalid user: {word}")
        self.word = word


def resolve_users(words: list[str]) -> set[int]:
    uids: set[int] = set()
    for w in words:
        if w.isascii() and w.isdigit() and len(w) <= 10:
            uids.add(int(w))
            continue
        try:
            uids.add(pwd.getpwnam(w).pw_uid)
        except KeyError:
            raise UserError(w) from None
    return uids


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
