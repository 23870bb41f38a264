"""Accounts, users, QOS and partition states changed at run time (``sacctmgr``,
``scontrol update PartitionName=``), without a restart.

``corral.toml`` stays the base; the changes made at run time are an *overlay* stored in
the database (one JSON document in the store's ``meta`` table, key ``admin_config``):
per kind (``accounts``, ``users``, ``qos``) a record per name, the whole entry as
``corral.toml`` would give it, or ``null`` for one deleted; per partition its ``state``.
The effective configuration is the base with the overlay applied, checked with the same
validation as a file (``corral.config.load.validate``: unknown parents, accounts, QOS and
duplicate names are refused with the key path), and it replaces ``Controller.cfg``; the
views derived from it (the scheduler's QOS and account tree, the fair-share ledger's tree,
the partitions, the feasibility memo, the metrics' tree) are rebuilt, and a cycle is
triggered, so the next cycle uses it. Every change is audited. A later edit of
``corral.toml`` applies at the next start, except where the overlay names the same entry
(the database wins, as Slurm's accounting database does over slurm.conf).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import TYPE_CHECKING, Any

from corral.config.schema import AccountConfig, ClusterConfig, QosConfig, UserConfig
from corral.controller.auth import Identity
from corral.controller.errors import ApiError

if TYPE_CHECKING:
    from corral.controller.service import Controller

log = logging.getLogger("corral.livecfg")

META_KEY = "admin_config"
KINDS: dict[str, type[Any]] = {"accounts": AccountConfig, "users": UserConfig,
                               "qos": QosConfig}


def _entry_json(obj: Any) -> dict[str, Any]:
    from corral.config.load import config_to_json

    out: dict[str, Any] = config_to_json(obj)
    return out


def effective(base: ClusterConfig, overlay: dict[str, Any]) -> ClusterConfig:
    """``base`` with ``overlay`` applied (``ConfigError`` when the result is not valid)."""
    from corral.config.load import build, validate
    from corral.core.model.partition import PartitionState

    changes: dict[str, Any] = {}
    for kind, cls in KINDS.items():
        over: dict[str, Any] = overlay.get(kind) or {}
        if not over:
            continue
        items = [e for e in getattr(base, kind) if e.name not in over]
        for name, data in over.items():
            if data is not None:
                items.append(build(cls, data, f"{kind}[{name}]"))
        changes[kind] = tuple(items)
    states: dict[str, Any] = overlay.get("partitions") or {}
    if states:
        changes["partitions"] = tuple(
            dataclasses.replace(p, state=PartitionState(states[p.name]["state"]))
            if p.name in states else p for p in base.partitions)
    cfg = dataclasses.replace(base, **changes) if changes else base
    validate(cfg)
    return cfg


class LiveConfig:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.base = ctl.cfg
        self.overlay: dict[str, Any] = {}

    def load_json(self, text: str | None) -> None:
        if not text:
            return
        overlay = json.loads(text)
        if not isinstance(overlay, dict):
            raise ValueError("not an object")
        self._apply(overlay, save=False)

    # ---- views -------------------------------------------------------------------------

    def find(self, kind: str, name: str) -> Any:
        return next((e for e in getattr(self.ctl.cfg, kind) if e.name == name), None)

    # ---- changes -----------------------------------------------------------------------

    def put(self, kind: str, name: str, data: dict[str, Any] | None, who: Identity,
            action: str) -> Any:
        """Set entry ``name`` of ``kind`` to ``data`` (a whole entry), or delete it
        (``None``); returns the new entry (or None)."""
        from corral.controller.audit import outcome_of, record

        details = {"kind": kind, "name": name, "data": data}
        try:
            if kind not in KINDS:
                raise ApiError("invalid", f"unknown kind {kind!r} (accounts, users, qos)")
            if not who.is_admin:
                raise ApiError("forbidden", f"user {who.user} is not an operator",
                               slurm="Access/permission denied")
            overlay = json.loads(json.dumps(self.overlay))  # a copy to try on
            overlay.setdefault(kind, {})[name] = None if data is None else \
                dict(data, name=name)
            self._apply(overlay)
        except ApiError as exc:
            record(self.ctl.store, who, action, f"{kind} {name}", details, outcome_of(exc))
            raise
        record(self.ctl.store, who, action, f"{kind} {name}", details)
        return self.find(kind, name)

    def set_partition_state(self, name: str, state: str, who: Identity) -> None:
        from corral.controller.audit import outcome_of, record

        details = {"state": state}
        try:
            if not who.is_admin:
                raise ApiError("forbidden", f"user {who.user} is not an operator",
                               slurm="Access/permission denied")
            if name not in {p.name for p in self.base.partitions}:
                raise ApiError("not_found", f"Partition {name} not found",
                               slurm="Invalid partition name specified")
            if state not in ("UP", "DOWN", "DRAIN", "INACTIVE"):
                raise ApiError("invalid", f"invalid partition state {state!r} (UP, DOWN, "
                               "DRAIN, INACTIVE)", slurm="Invalid partition state specified")
            overlay = json.loads(json.dumps(self.overlay))
            overlay.setdefault("partitions", {})[name] = {"state": state}
            self._apply(overlay)
        except ApiError as exc:
            record(self.ctl.store, who, "partition_update", f"partition {name}", details,
                   outcome_of(exc))
            raise
        record(self.ctl.store, who, "partition_update", f"partition {name}", details)

    def reapply(self) -> None:
        """The base changed (``corral config reload``): the overlay on the new base."""
        self._apply(self.overlay, save=False)
        self.ctl.sched.trigger()

    def _apply(self, overlay: dict[str, Any], save: bool = True) -> None:
        from corral.config.load import ConfigError

        try:
            cfg = effective(self.base, overlay)
        except ConfigError as exc:
            raise ApiError("invalid", str(exc)) from None
        self.overlay = overlay
        ctl = self.ctl
        ctl.cfg = cfg
        ctl.sched.config_changed()
        ctl.ledger.tree = cfg.account_tree()
        ctl.nodes.config_changed()
        col = getattr(ctl.metrics, "ops_collector", None)
        if col is not None and hasattr(col, "_tree"):
            col._tree = None
        if save:
            ctl.store.submit(ctl.store.op_set_meta(META_KEY, json.dumps(
                overlay, separators=(",", ":"), default=str)))
            ctl.sched.trigger()
            log.info("configuration changed at run time: %s", json.dumps(overlay)[:2000])


def entry_data(obj: Any) -> dict[str, Any]:
    """An entry as ``corral.toml`` data (for a modify: change fields, then ``put``)."""
    return _entry_json(obj)
