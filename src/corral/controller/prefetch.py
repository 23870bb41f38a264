"""Early image pulls: a pending container job's image is pulled into the cache of the
node the scheduler plans it on, while that node is still busy, so that the job starts
as a cache hit when the node frees up (docs/containers.md, "The node image cache").

Policy (``Prefetcher.plan``, after every scheduling cycle):

- The cycle's planned starts (``core.decisions.Reserve``: job, start time, nodes) that
  begin within ``[containers] prefetch_horizon_s`` are visited, earliest first. For each
  planned node whose cache does not hold the job's image (the agents' reports, as for
  the placement preference of ``corral.controller.images``), that node's agent is asked
  to pull it (``image_pull`` with ``early``: a cached image is left as it is, never
  refreshed), unless the node already runs ``prefetch_per_node`` early pulls.
- **Never a reservation, never a wait.** Nothing of the node is allocated or held: the
  pull is a child process of its agent, and the job's placement is the scheduler's as
  before. A job that then starts elsewhere pulls there as it always did; one that
  starts while its early pull still runs waits on the cache's lock for that pull
  instead of starting a second one.
- **Only what the job's user may read.** Registry images were checked at submit
  (``allowed_registries``); a SIF is opened on the node with the job's uid/gid, as
  ``corral image pull`` does with the asking user's, so a file the user cannot read is
  not unpacked.
- **Bounded.** One request per (node, image) at a time; a failed one is not asked for
  again for ``RETRY_S``; one that the agent never answers is forgotten after the pull
  timeout; a node's requests are forgotten when its agent disconnects.
- **Shown on the job.** ``JobRecord.image_prefetch`` (node -> what is happening there:
  asked, pulling with the bytes so far, pulled, failed and why; not persisted) is the
  ``image_prefetch`` object of the job's JSON and the ``Image pull`` line of
  ``corral show``.

Planned starts without node names (the count form of the backfill profile, used for
clusters of one-core nodes) give no early pull.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from corral.controller.images import holders, image_of

RETRY_S = 300.0  # a failed early pull of an image on a node is not asked for again before


@dataclass
class EarlyPull:
    node: str
    ref: str
    since: float
    jobs: set[int] = field(default_factory=set)
    state: str = "asked"  # asked | pulling | done | failed
    note: str = ""  # the agent's latest progress note
    error: str = ""
    ended: float = 0.0

    @property
    def active(self) -> bool:
        return self.state in ("asked", "pulling")

    def text(self) -> str:
        if self.state == "asked":
            return f"pull of {self.ref} asked for ahead of the start"
        if self.state == "pulling":
            return f"{self.note or 'pulling ' + self.ref} (ahead of the start)"
        if self.state == "done":
            return f"{self.ref} pulled ahead of the start"
        return (f"early pull of {self.ref} failed: {self.error} (the job pulls it where it "
                "starts)")


class Prefetcher:
    def __init__(self, ctl: Any) -> None:
        self.ctl = ctl
        self.pulls: dict[tuple[str, str], EarlyPull] = {}
        self._refs: dict[int, tuple[Any, str]] = {}  # job id -> (submission, image)
        self.asked = 0  # early pulls asked for since start (a counter for tests/metrics)

    def _ref(self, rec: Any) -> str:
        sub = rec.sub
        if "container" not in sub.extra:
            return ""
        got = self._refs.get(rec.id)
        if got is not None and got[0] is sub:
            return got[1]
        ref = image_of(rec)
        self._refs[rec.id] = (sub, ref)
        return ref

    def _expire(self, now: float) -> None:
        timeout = float(self.ctl.cfg.containers.pull_timeout_s) + 60.0
        for key, p in list(self.pulls.items()):
            if (p.active and now - p.since > timeout) or \
                    (p.state == "failed" and now - p.ended > RETRY_S):
                del self.pulls[key]
        pending = self.ctl.pending
        if len(self._refs) > 2 * len(pending) + 64:
            self._refs = {j: v for j, v in self._refs.items() if j in pending}

    def plan(self, reservations: Iterable[Any], now: float) -> int:
        """Ask the planned nodes' agents for the images of the jobs planned to start
        within the horizon (module docstring); returns how many pulls were asked for."""
        cc = self.ctl.cfg.containers
        if not (cc.enabled and cc.prefetch):
            return 0
        self._expire(now)
        horizon = float(cc.prefetch_horizon_s)
        soon = sorted((r for r in reservations if r.nodes and r.start_time - now <= horizon),
                      key=lambda r: (r.start_time, r.job_id))
        if not soon:
            return 0
        pending = self.ctl.pending
        conns = self.ctl.hub.conns
        have: dict[str, tuple[str, ...]] | None = None
        busy = Counter(p.node for p in self.pulls.values() if p.active)
        asked = 0
        for r in soon:
            rec = pending.get(r.job_id)
            if rec is None:
                continue
            ref = self._ref(rec)
            if not ref:
                continue
            if have is None:
                have = holders(self.ctl.nodes.nodes)
            for node in dict.fromkeys(r.nodes):
                if node in have.get(ref, ()):
                    continue
                p = self.pulls.get((node, ref))
                if p is not None:
                    if rec.id not in p.jobs:
                        p.jobs.add(rec.id)
                        self._show(p)
                    continue
                conn = conns.get(node)
                if conn is None or busy[node] >= cc.prefetch_per_node:
                    continue
                msg: dict[str, Any] = {"t": "image_pull", "ref": ref, "early": True}
                if not ref.startswith("docker://"):  # a SIF: opened as the job's user
                    msg.update({"uid": rec.spec.uid, "gid": rec.spec.gid})
                conn.send(msg)
                p = EarlyPull(node, ref, now, {rec.id})
                self.pulls[(node, ref)] = p
                busy[node] += 1
                asked += 1
                self._show(p)
        self.asked += asked
        return asked

    def report(self, node: str, changes: Any, now: float) -> None:
        """The agent's ``image_pull_state`` list: progress and ends of its pulls (those
        not asked for here, e.g. ``corral image pull``'s, are left alone)."""
        if not isinstance(changes, list):
            return
        for c in changes[:64]:
            if not isinstance(c, dict):
                continue
            p = self.pulls.get((node, str(c.get("ref") or "")))
            if p is None:
                continue
            state = str(c.get("state") or "")
            if state == "pulling":
                p.state, p.note = "pulling", str(c.get("note") or "")[:300]
            elif state == "done":
                p.state, p.ended = "done", now
                del self.pulls[(node, p.ref)]  # the node's image list now holds it
            elif state == "failed":
                p.state, p.ended = "failed", now
                p.error = str(c.get("error") or "unknown error")[:600]
            else:
                continue
            self._show(p)

    def node_gone(self, node: str) -> None:
        """The node's agent disconnected: its requests are forgotten (asked again when
        it is back and a job is still planned there without the image)."""
        for key in [k for k, p in self.pulls.items() if p.node == node and p.active]:
            del self.pulls[key]

    def _show(self, p: EarlyPull) -> None:
        text = p.text()
        jobs = self.ctl.jobs
        for jid in p.jobs:
            rec = jobs.get(jid)
            if rec is None or (rec.image_prefetch or {}).get(p.node) == text:
                continue
            rec.image_prefetch = {**(rec.image_prefetch or {}), p.node: text}
            rec.touch_api()
