"""Advance reservations on the controller: create, update, delete, list, persist.

Slurm 22.05's model (``scontrol create reservation``): a name, a window (start, end or
duration), nodes (a hostlist, ``ALL``, or a count chosen at creation), who may use it
(``users`` and/or ``accounts``), an optional partition and flags:

- ``MAINT``: maintenance; jobs waiting for its nodes say ``ReqNodeNotAvail, Reserved for
  maintenance``;
- ``IGNORE_JOBS``: may be created over nodes whose running jobs would still run in the
  window (else "Requested nodes are busy");
- ``OVERLAP``: may share nodes and time with other reservations (else refused);
- ``DAILY`` / ``WEEKLY``: when it ends it moves one day / week ahead instead of going away;
- ``FLEX``: its jobs may start before it, run past its end and use nodes outside it as
  well as its own (tried first; ``corral.core.advance``);
- ``SPEC_NODES`` (given nodes) and ``ALL_NODES`` (``Nodes=ALL``) are set as Slurm sets them.

A reservation that ended (and does not repeat) is removed. The table is stored as one
JSON document in the store's ``meta`` table (key ``advance_reservations``), written in
the next commit after each change, and loaded at start; the scheduler sees it as
``corral.core.model.reservation.AdvanceReservation`` data. Only operators change it;
every change is in the audit trail. A job asks with ``--reservation=NAME``: refused at
submit when the reservation does not exist (``Requested reservation is invalid``) or does
not allow its user or account (``Access denied to requested reservation``).
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from corral.controller.auth import Identity
from corral.controller.errors import ApiError
from corral.core.model.reservation import AdvanceReservation

if TYPE_CHECKING:
    from corral.controller.service import Controller
    from corral.submission import JobSubmission

log = logging.getLogger("corral.reservations")

META_KEY = "advance_reservations"
FLAGS = ("MAINT", "IGNORE_JOBS", "OVERLAP", "DAILY", "WEEKLY", "FLEX", "SPEC_NODES",
         "ALL_NODES")
_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_USER = re.compile(r"^[A-Za-z0-9_.\-$@]{1,64}$")
MAX_RESERVATIONS = 1000
_PERIOD_S = {"DAILY": 86400.0, "WEEKLY": 7 * 86400.0}


@dataclass(frozen=True)
class Reservation:
    name: str
    start_time: float
    end_time: float
    nodes: tuple[str, ...]
    users: tuple[str, ...] | None = None
    accounts: tuple[str, ...] | None = None
    flags: tuple[str, ...] = ()
    partition: str | None = None

    def to_core(self) -> AdvanceReservation:
        return AdvanceReservation(
            self.name, self.start_time, self.end_time, self.nodes,
            users=None if self.users is None else frozenset(self.users),
            accounts=None if self.accounts is None else frozenset(self.accounts),
            flags=frozenset(self.flags))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "start_time": self.start_time, "end_time": self.end_time,
                "nodes": list(self.nodes), "users": self.users and list(self.users),
                "accounts": self.accounts and list(self.accounts), "flags": list(self.flags),
                "partition": self.partition}

    @staticmethod
    def from_json(d: dict[str, Any]) -> Reservation:
        return Reservation(
            str(d["name"]), float(d["start_time"]), float(d["end_time"]),
            tuple(str(n) for n in d["nodes"]),
            None if d.get("users") is None else tuple(str(u) for u in d["users"]),
            None if d.get("accounts") is None else tuple(str(a) for a in d["accounts"]),
            tuple(str(f) for f in d.get("flags") or ()),
            None if d.get("partition") is None else str(d["partition"]))

    def state(self, now: float) -> str:
        return "ACTIVE" if self.start_time <= now < self.end_time else "INACTIVE"

    def allows(self, user: str, account: str | None) -> bool:
        return self.to_core().allows(user, account)


class ReservationTable:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.items: dict[str, Reservation] = {}
        self.requested: dict[int, str] = {}  # pending job id -> the reservation it asked for
        self._core: tuple[AdvanceReservation, ...] = ()

    # ---- persistence -----------------------------------------------------------------

    def load_json(self, text: str | None) -> None:
        if not text:
            return
        for d in json.loads(text):
            r = Reservation.from_json(d)
            self.items[r.name] = r
        self._changed(save=False)

    def _changed(self, save: bool = True) -> None:
        self._core = tuple(r.to_core() for r in sorted(self.items.values(),
                                                       key=lambda r: (r.start_time, r.name)))
        if save:
            text = json.dumps([r.to_json() for r in self.items.values()],
                              separators=(",", ":"))
            self.ctl.store.submit(self.ctl.store.op_set_meta(META_KEY, text))
            self.ctl.sched.trigger()

    # ---- views -----------------------------------------------------------------------

    def core(self) -> tuple[AdvanceReservation, ...]:
        return self._core

    def job_reservations(self) -> dict[int, str]:
        """Pending jobs that asked for a reservation (for the snapshot)."""
        pending = self.ctl.pending
        for jid in [j for j in self.requested if j not in pending]:
            del self.requested[jid]
        return dict(self.requested)

    def api(self, now: float) -> list[dict[str, Any]]:
        return [self.to_api(r, now) for r in sorted(self.items.values(),
                                                    key=lambda r: (r.start_time, r.name))]

    def to_api(self, r: Reservation, now: float) -> dict[str, Any]:
        from corral.core.parse.hostlist import compress

        specs = [self.ctl.nodes.nodes[n].spec for n in r.nodes if n in self.ctl.nodes.nodes]
        return {**r.to_json(), "duration_s": r.end_time - r.start_time,
                "nodelist": compress(list(r.nodes)), "node_count": len(r.nodes),
                "core_count": sum(s.cores for s in specs),
                "cpu_count": sum(s.cpus for s in specs), "state": r.state(now)}

    def get(self, name: str) -> Reservation:
        r = self.items.get(name)
        if r is None:
            raise ApiError("not_found", f"Reservation {name} not found",
                           slurm=f"Reservation {name} not found")
        return r

    # ---- jobs ------------------------------------------------------------------------

    def check_submit(self, sub: JobSubmission) -> None:
        """A submission's ``--reservation``: it must exist, not be over, and allow the
        job's user or account (the name is kept in ``extra["reservation"]``)."""
        name = sub.extra.get("reservation")
        if not name:
            return
        r = self.items.get(name)
        if r is None or r.end_time <= time.time():
            raise ApiError("invalid", f"reservation {name!r} does not exist",
                           slurm="Requested reservation is invalid")
        if not r.allows(sub.spec.user, sub.spec.account):
            raise ApiError("invalid", f"reservation {name} does not allow user "
                           f"{sub.spec.user} (account {sub.spec.account})",
                           slurm="Access denied to requested reservation")

    def note_job(self, job_id: int, name: str | None) -> None:
        if name:
            self.requested[job_id] = name

    # ---- operator actions ------------------------------------------------------------

    def _audited(self, who: Identity, action: str, name: str, details: dict[str, Any],
                 fn: Any) -> Any:
        from corral.controller.audit import outcome_of, record

        try:
            out = fn()
        except ApiError as exc:
            record(self.ctl.store, who, action, f"reservation {name}", details,
                   outcome_of(exc))
            raise
        record(self.ctl.store, who, action, f"reservation {name}", details)
        return out

    def create(self, body: dict[str, Any], who: Identity) -> Reservation:
        name = str(body.get("name") or "")
        return self._audited(who, "reservation_create", name or "(new)", body,  # type: ignore[no-any-return]
                             lambda: self._create(body, who))

    def update(self, name: str, body: dict[str, Any], who: Identity) -> Reservation:
        return self._audited(who, "reservation_update", name, body,  # type: ignore[no-any-return]
                             lambda: self._update(name, body))

    def delete(self, name: str, who: Identity) -> None:
        self._audited(who, "reservation_delete", name, {}, lambda: self._delete(name))

    def _create(self, body: dict[str, Any], who: Identity) -> Reservation:
        if len(self.items) >= MAX_RESERVATIONS:
            raise ApiError("invalid", f"at most {MAX_RESERVATIONS} reservations")
        now = time.time()
        name = str(body.get("name") or "")
        if not name:
            n = 1
            while f"{who.user}_{n}" in self.items:
                n += 1
            name = f"{who.user}_{n}"
        if not _NAME.match(name):
            raise ApiError("invalid", f"bad reservation name {name!r} (letters, digits, "
                           "_ . -; at most 64)")
        if name in self.items:
            raise ApiError("conflict", f"reservation {name} already exists",
                           slurm="Duplicate reservation name")
        if body.get("start_time") is None:
            raise ApiError("invalid", "StartTime must be specified")
        start = _time(body["start_time"], now, "start_time")
        end = self._end(body, start, now)
        flags = _flags(body.get("flags"), ())
        users = _names(body.get("users"), "users")
        accounts = _names(body.get("accounts"), "accounts")
        if users is None and accounts is None:
            raise ApiError("invalid", "Users or Accounts must be specified")
        partition = body.get("partition")
        if partition is not None:
            self._partition(str(partition))
        nodes, flags = self._nodes(body, flags, partition, start, end, name)
        r = Reservation(name, start, end, nodes, users, accounts, flags,
                        None if partition is None else str(partition))
        self._check_busy(r)
        self.items[name] = r
        self._changed()
        log.info("reservation %s created by %s: %s", name, who.user, r.to_json())
        return r

    def _update(self, name: str, body: dict[str, Any]) -> Reservation:
        r = self.get(name)
        now = time.time()
        changes: dict[str, Any] = {}
        if body.get("start_time") is not None:
            changes["start_time"] = _time(body["start_time"], now, "start_time")
        start = changes.get("start_time", r.start_time)
        if body.get("end_time") is not None or body.get("duration_s") is not None:
            changes["end_time"] = self._end(body, start, now)
        elif "start_time" in changes:  # moved: the duration stays
            changes["end_time"] = start + (r.end_time - r.start_time)
        if body.get("users") is not None:
            changes["users"] = _edit(r.users, body["users"], "users")
        if body.get("accounts") is not None:
            changes["accounts"] = _edit(r.accounts, body["accounts"], "accounts")
        flags = _flags(body.get("flags"), r.flags)
        if body.get("partition") is not None:
            changes["partition"] = self._partition(str(body["partition"]))
        if body.get("nodes") is not None or body.get("node_count") is not None:
            nodes, flags = self._nodes(body, flags, changes.get("partition", r.partition),
                                       start, changes.get("end_time", r.end_time), name)
            changes["nodes"] = nodes
        changes["flags"] = flags
        new = replace(r, **changes)
        if new.end_time <= new.start_time:
            raise ApiError("invalid", "the reservation would end before it starts")
        if new.users is None and new.accounts is None:
            raise ApiError("invalid", "Users or Accounts must be specified")
        self._check_busy(new)
        self.items[name] = new
        self._changed()
        return new

    def _delete(self, name: str) -> None:
        self.get(name)
        del self.items[name]
        self._changed()

    # ---- time ------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Reservations that ended: repeating ones move on, the others go."""
        changed = False
        for name, r in list(self.items.items()):
            if r.end_time > now:
                continue
            period = next((_PERIOD_S[f] for f in r.flags if f in _PERIOD_S), None)
            changed = True
            if period is None:
                log.info("reservation %s ended", name)
                del self.items[name]
                continue
            steps = int((now - r.start_time) // period) + 1
            while r.start_time + steps * period + (r.end_time - r.start_time) <= now:
                steps += 1
            self.items[name] = replace(r, start_time=r.start_time + steps * period,
                                       end_time=r.end_time + steps * period)
        if changed:
            self._changed()

    # ---- checks ----------------------------------------------------------------------

    def _end(self, body: dict[str, Any], start: float, now: float) -> float:
        if body.get("end_time") is not None:
            end = _time(body["end_time"], now, "end_time")
        elif body.get("duration_s") is not None:
            d = body["duration_s"]
            if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 < d < 1e10:
                raise ApiError("invalid", "bad field duration_s: a positive number of "
                               "seconds")
            end = start + float(d)
        else:
            raise ApiError("invalid", "EndTime or Duration must be specified")
        if end <= start:
            raise ApiError("invalid", "the reservation would end before it starts")
        return end

    def _partition(self, name: str) -> str:
        if name not in {p.name for p in self.ctl.nodes.partitions}:
            raise ApiError("invalid", f"invalid partition specified: {name}",
                           slurm="Invalid partition name specified")
        return name

    def _nodes(self, body: dict[str, Any], flags: tuple[str, ...], partition: Any,
               start: float, end: float, name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        from corral.core.parse.errors import ParseError
        from corral.core.parse.hostlist import expand

        table = self.ctl.nodes
        pool = sorted(table.nodes)
        if partition is not None:
            part = next(p for p in table.partitions if p.name == partition)
            pool = [n for n in pool if n in part.nodes]
        text = body.get("nodes")
        fl = [f for f in flags if f not in ("SPEC_NODES", "ALL_NODES")]
        if text is not None:
            if not isinstance(text, str) or len(text) > 65536:
                raise ApiError("invalid", "bad field nodes: a host list")
            if text.strip().upper() == "ALL":
                if not pool:
                    raise ApiError("invalid", "no nodes to reserve")
                return tuple(pool), tuple(fl + ["SPEC_NODES", "ALL_NODES"])
            try:
                names = expand(text)
            except ParseError as exc:
                raise ApiError("invalid", f"bad field nodes: {exc}") from None
            unknown = [n for n in names if n not in table.nodes]
            if unknown:
                raise ApiError("invalid", f"Invalid node name specified: {unknown[0]}",
                               slurm="Invalid node name specified")
            return tuple(dict.fromkeys(names)), tuple(fl + ["SPEC_NODES"])
        count = body.get("node_count")
        if count is None:
            raise ApiError("invalid", "Nodes or NodeCnt must be specified")
        if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= 100000:
            raise ApiError("invalid", "bad field node_count: a positive whole number")
        # nodes that are up, free over the window and in no other reservation then
        free = []
        for n in pool:
            rec = table.nodes[n]
            if not rec.state.runs_jobs:
                continue
            if any(o.name != name and n in o.nodes and o.start_time < end
                   and start < o.end_time for o in self.items.values()):
                continue
            if "IGNORE_JOBS" not in flags and self._busy_until(n) > start:
                continue
            free.append(n)
        if len(free) < count:
            raise ApiError("conflict", f"only {len(free)} nodes are free for the window; "
                           f"{count} asked for", slurm="Requested nodes are busy")
        return tuple(free[:count]), tuple(fl)

    def _busy_until(self, node: str) -> float:
        """When the jobs now on ``node`` end at the latest (start + time limit)."""
        rec = self.ctl.nodes.nodes.get(node)
        latest = 0.0
        for jid in rec.jobs if rec is not None else ():
            job = self.ctl.jobs.get(jid)
            if job is None or job.start_time is None:
                continue
            limit = job.time_limit_s
            latest = max(latest, float("inf") if not limit else
                         job.start_time + job.suspended_s + limit)
        return latest

    def _check_busy(self, r: Reservation) -> None:
        if "OVERLAP" not in r.flags:
            for o in self.items.values():
                if o.name != r.name and o.start_time < r.end_time and r.start_time < o.end_time \
                        and set(o.nodes) & set(r.nodes) and "OVERLAP" not in o.flags:
                    raise ApiError("conflict", f"reservation {o.name} holds some of these "
                                   "nodes in that window (flag OVERLAP allows it)",
                                   slurm="Requested nodes are busy")
        if "IGNORE_JOBS" not in r.flags:
            busy = [n for n in r.nodes if self._busy_until(n) > r.start_time]
            if busy:
                raise ApiError("conflict", f"running jobs on {busy[0]} would still run in the "
                               "window (flag IGNORE_JOBS allows it)",
                               slurm="Requested nodes are busy")


def _time(value: Any, now: float, field: str) -> float:
    if value == "now":
        return now
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0 <= value < 1e11:
        raise ApiError("invalid", f"bad field {field}: seconds since the epoch, or \"now\"")
    return float(value)


def _flags(value: Any, current: tuple[str, ...]) -> tuple[str, ...]:
    """Flags as given (``["MAINT"]``); ``"+X"``/``"-X"`` items add to or remove from
    ``current``."""
    if value is None:
        return current
    if not isinstance(value, list) or len(value) > 32:
        raise ApiError("invalid", "bad field flags: a list of flags")
    out = list(current) if any(str(v)[:1] in "+-" for v in value) else []
    for v in value:
        s = str(v)
        op = s[:1] if s[:1] in "+-" else ""
        flag = s[len(op):].upper()
        if flag not in FLAGS:
            raise ApiError("invalid", f"invalid flag {s!r} (known: {', '.join(FLAGS)})",
                           slurm="Invalid reservation flags")
        if op == "-":
            out = [f for f in out if f != flag]
        elif flag not in out:
            out.append(flag)
    return tuple(out)


def _names(value: Any, field: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value or len(value) > 10000:
        raise ApiError("invalid", f"bad field {field}: a non-empty list of names")
    for v in value:
        if not isinstance(v, str) or not _USER.match(v):
            raise ApiError("invalid", f"bad field {field}: bad name {v!r}")
    return tuple(dict.fromkeys(value))


def _edit(current: tuple[str, ...] | None, value: Any, field: str) -> tuple[str, ...] | None:
    """``["+bob"]`` adds, ``["-bob"]`` removes, a plain list replaces."""
    if not isinstance(value, list):
        raise ApiError("invalid", f"bad field {field}: a list of names")
    if not any(isinstance(v, str) and v[:1] in "+-" for v in value):
        return _names(value, field)
    out = list(current or ())
    for v in value:
        s = str(v)
        op, nm = (s[0], s[1:]) if s[:1] in "+-" else ("+", s)
        _names([nm], field)
        if op == "-":
            out = [x for x in out if x != nm]
        elif nm not in out:
            out.append(nm)
    return tuple(out) or None
