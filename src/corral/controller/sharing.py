"""One copy of what many jobs hold alike: their submissions and environments.

A shell loop of ``sbatch`` from one shell, a workflow tool's jobs and an array's tasks
carry the same environment (often 1-3 KB of variables, a few dozen strings each), and,
stored one row per job, often the very same submission text. Parsed one job at a time,
each job got its own copy of all of it: most of a pending job's memory (issue 19's target:
at most 4 KB per pending job) and most of the time to load 100,000 of them.

``EnvPool.share`` returns the pool's dict equal to a job's environment (a copy of its own
the first time); ``SubmissionPool.parse`` returns the submission already parsed from
the same stored text. Both are bounded (least recently used dropped first) and both rely
on what is shared never being changed: a submission is frozen, and its environment is only
ever copied (``corral.controller.env``) or serialized, never written to.
"""

from __future__ import annotations

import json
from collections import OrderedDict

from corral.submission import JobSubmission


class EnvPool:
    def __init__(self, max_entries: int = 1024) -> None:
        self.max_entries = max_entries
        self._pool: OrderedDict[tuple[tuple[str, str], ...], dict[str, str]] = OrderedDict()

    def share(self, env: dict[str, str]) -> dict[str, str]:
        """The pool's dict equal to ``env``; ``env`` itself when it is empty or not a
        plain dict of hashable values (a damaged stored record stays as it was read, for
        the scheduler to hold with its error, not made unreadable here)."""
        if not env or type(env) is not dict:
            return env
        key = tuple(env.items())
        try:
            got = self._pool.get(key)
        except TypeError:  # an unhashable value
            return env
        if got is not None:
            self._pool.move_to_end(key)
            return got
        own = dict(env)  # the pool's own copy: the caller may still change theirs
        self._pool[key] = own
        if len(self._pool) > self.max_entries:
            self._pool.popitem(last=False)
        return own

    def share_in(self, sub: JobSubmission) -> JobSubmission:
        """``sub`` holding the pool's copy of its environment (the same object: a fresh
        submission nobody else holds yet, so setting its frozen field is safe)."""
        env = self.share(sub.env)
        if env is not sub.env:
            object.__setattr__(sub, "env", env)
        return sub


class SubmissionPool:
    """Stored submission text -> its parsed ``JobSubmission`` (for a bulk load)."""

    def __init__(self, envs: EnvPool | None = None, max_entries: int = 256) -> None:
        self.envs = envs or EnvPool()
        self.max_entries = max_entries
        self._subs: OrderedDict[str, JobSubmission] = OrderedDict()

    def parse(self, text: str) -> JobSubmission:
        got = self._subs.get(text)
        if got is not None:
            self._subs.move_to_end(text)
            return got
        sub = self.envs.share_in(JobSubmission.from_json(json.loads(text)))
        self._subs[text] = sub
        if len(self._subs) > self.max_entries:
            self._subs.popitem(last=False)
        return sub
