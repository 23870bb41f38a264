"""One copy of what many jobs hold alike: their submissions, specs and environments.

A shell loop of ``sbatch`` from one shell, a workflow tool's jobs and an array's tasks
carry the same environment (often 1-3 KB of variables, a few dozen strings each), and,
stored one row per job, often the very same submission text. Parsed one job at a time,
each job got its own copy of all of it: most of a pending job's memory (issue 19's target:
at most 4 KB per pending job) and most of the time to load 100,000 of them.

``EnvPool.share`` returns the pool's dict equal to a job's environment (a copy of its own
the first time), ``EnvPool.share_spec`` the pool's ``JobSpec`` equal to a job's (jobs
alike in all but their command then also share the core's memos, kept per spec object),
and ``SubmissionPool.parse`` the submission already parsed from the same stored text.
All are bounded (least recently used dropped first) and rely on what is shared never
being changed: submissions and specs are frozen, and an environment is only ever copied
(``corral.controller.env``) or serialized, never written to.
"""

from __future__ import annotations

import json
from collections import OrderedDict

from corral.core.model.job import JobSpec
from corral.submission import JobSubmission


class EnvPool:
    def __init__(self, max_entries: int = 1024) -> None:
        self.max_entries = max_entries
        self._pool: OrderedDict[tuple[tuple[str, str], ...], dict[str, str]] = OrderedDict()
        self._specs: OrderedDict[JobSpec, JobSpec] = OrderedDict()

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

    def share_spec(self, spec: JobSpec) -> JobSpec:
        """The pool's ``JobSpec`` equal to ``spec`` (frozen, compared field by field);
        ``spec`` itself when it has no equal yet or cannot be hashed. Equal specs are
        then one object, so the scheduling core's memos, which it keeps per spec object
        (shape, feasibility plan, priority terms), are one per kind of job as well."""
        try:
            got = self._specs.get(spec)
        except TypeError:  # a field holding something unhashable
            return spec
        if got is not None:
            self._specs.move_to_end(spec)
            return got
        self._specs[spec] = spec
        if len(self._specs) > self.max_entries:
            self._specs.popitem(last=False)
        return spec

    def share_in(self, sub: JobSubmission) -> JobSubmission:
        """``sub`` holding the pool's copies of its environment and spec (the same
        object: a fresh submission nobody else holds yet, so setting its frozen fields
        is safe)."""
        env = self.share(sub.env)
        if env is not sub.env:
            object.__setattr__(sub, "env", env)
        spec = self.share_spec(sub.spec)
        if spec is not sub.spec:
            object.__setattr__(sub, "spec", spec)
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
