"""Load and validate ``corral.toml`` into a ``ClusterConfig``.

The mapping is generic: each TOML table becomes the dataclass of the same field, arrays
of tables become tuples of dataclasses, enums are matched case-insensitively by value.
Unknown keys, wrong types and bad values raise ``ConfigError`` naming the exact key path
(``partitions[1].max_time_s``) with a suggestion for misspelled keys. Durations (``*_s``)
and sizes (``*_mb``) accept numbers or Slurm strings (``"2-00:00:00"``, ``"16G"``).
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import tomllib
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from corral.config.schema import ClusterConfig, NodeConfig
from corral.core.runtime import HOST, VM

T = typing.TypeVar("T")


class ConfigError(ValueError):
    """A configuration problem at ``key`` (dotted path), with a message a person can act on."""

    def __init__(self, key: str, message: str, path: str | None = None) -> None:
        where = f"{path}: " if path else ""
        super().__init__(f"{where}{key}: {message}" if key else f"{where}{message}")
        self.key = key
        self.message = message
        self.path = path


def _time_s(key: str, value: Any) -> int | None:
    if isinstance(value, bool):
        raise ConfigError(key, "expected a duration in seconds or Slurm time syntax")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ConfigError(key, "must not be negative")
        return int(value)
    if isinstance(value, str):
        from corral.core.parse.errors import ParseError
        from corral.core.parse.timefmt import parse_time_s

        try:
            return parse_time_s(value)
        except ParseError as exc:
            raise ConfigError(key, f"bad duration {value!r}: {exc}") from None
    raise ConfigError(key, f"expected a duration, got {type(value).__name__}")


def _mem_mb(key: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ConfigError(key, "expected a size in MB or a string like '16G'")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(key, "must not be negative")
        return value
    if isinstance(value, str):
        from corral.core.parse.errors import ParseError
        from corral.core.parse.memory import parse_mem_mb

        try:
            return parse_mem_mb(value)
        except ParseError as exc:
            raise ConfigError(key, f"bad size {value!r}: {exc}") from None
    raise ConfigError(key, f"expected a size, got {type(value).__name__}")


def _convert(key: str, tp: Any, value: Any, name: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        if value is None:
            return None
        if len(non_none) == 1:
            if non_none[0] is int and name.endswith("_s") and isinstance(value, str):
                return _time_s(key, value)  # UNLIMITED -> None
            return _convert(key, non_none[0], value, name)
        raise ConfigError(key, "unsupported union type")  # pragma: no cover
    if tp is int and name.endswith(("_s", "_mb")):
        conv = _time_s(key, value) if name.endswith("_s") else _mem_mb(key, value)
        if conv is None:
            raise ConfigError(key, "UNLIMITED is not allowed here")
        return conv
    if tp is float and name.endswith("_s") and isinstance(value, str):
        return float(_time_s(key, value) or 0)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if not isinstance(value, str):
            raise ConfigError(key, f"expected one of {[m.value for m in tp]}")
        for m in tp:
            if str(m.value).lower() == value.lower() or m.name.lower() == value.lower():
                return m
        raise ConfigError(key, f"{value!r} is not one of {[m.value for m in tp]}")
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"expected a table, got {type(value).__name__}")
        return build(tp, value, key)
    if origin is tuple:
        if name == "gres":
            return _gres(key, value)
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise ConfigError(key, f"expected a list, got {type(value).__name__}")
        item_tp = args[0]
        return tuple(_convert(f"{key}[{i}]", item_tp, v, name) for i, v in enumerate(value))
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(key, f"expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"expected a whole number, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(key, f"expected a string, got {value!r}")
        return value
    raise ConfigError(key, f"unsupported type {tp!r}")  # pragma: no cover


def _gres(key: str, value: Any) -> tuple[tuple[str, int], ...]:
    """``{nvme = 2}`` or ``"nvme:2,fpga:1"`` or ``[["nvme", 2]]``."""
    out: list[tuple[str, int]] = []
    if isinstance(value, Mapping):
        items = list(value.items())
    elif isinstance(value, str):
        items = []
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            nm, _, cnt = part.rpartition(":")
            if not nm or not cnt.isdigit():
                raise ConfigError(key, f"bad gres item {part!r} (expected name:count)")
            items.append((nm, int(cnt)))
    elif isinstance(value, list):
        items = [tuple(v) for v in value]
    else:
        raise ConfigError(key, "expected a table of name = count")
    for nm, cnt in items:
        if not isinstance(cnt, int) or isinstance(cnt, bool) or cnt < 0:
            raise ConfigError(f"{key}.{nm}", "expected a non-negative whole number")
        out.append((str(nm), cnt))
    return tuple(out)


def build(cls: type[T], data: Mapping[str, Any], prefix: str = "") -> T:
    """Build dataclass ``cls`` from a mapping, validating every key."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for k, v in data.items():
        key = f"{prefix}.{k}" if prefix else k
        if k not in fields:
            close = difflib.get_close_matches(k, list(fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(key, f"unknown key{hint}")
        kwargs[k] = _convert(key, hints[k], v, k)
    missing = [
        n for n, f in fields.items()
        if n not in kwargs and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f"{prefix}.{missing[0]}" if prefix else missing[0], "is required")
    return cls(**kwargs)


def _unique(kind: str, names: list[str]) -> None:
    """Names of ``[[kind]]`` entries: present and distinct."""
    seen: set[str] = set()
    for i, n in enumerate(names):
        if not n:
            raise ConfigError(f"{kind}[{i}].name", "must not be empty")
        if n in seen:
            raise ConfigError(f"{kind}[{i}].name", f"duplicate name {n!r}")
        seen.add(n)


def validate(cfg: ClusterConfig) -> None:
    """Cross-field checks: unique names, references that resolve, sane numbers."""
    from corral.core.parse.errors import ParseError
    from corral.core.parse.hostlist import expand

    node_names: set[str] = set()
    for i, n in enumerate(cfg.nodes):
        try:
            names = expand(n.name)
        except ParseError as exc:
            raise ConfigError(f"nodes[{i}].name", str(exc)) from None
        for nm in names:
            if nm in node_names:
                raise ConfigError(f"nodes[{i}].name", f"duplicate node {nm!r}")
            node_names.add(nm)
    _unique("partitions", [p.name for p in cfg.partitions])
    _unique("qos", [q.name for q in cfg.qos])
    _unique("accounts", [a.name for a in cfg.accounts])
    _unique("users", [u.name for u in cfg.users])
    _unique("licenses", [lic.name for lic in cfg.licenses])
    for i, lic in enumerate(cfg.licenses):
        if not lic.name or any(c in lic.name for c in ":,= \t"):
            raise ConfigError(f"licenses[{i}].name", f"bad license name {lic.name!r}")
        if not 0 <= lic.count < 2 ** 31:
            raise ConfigError(f"licenses[{i}].count", f"must be 0 or more, got {lic.count}")
    from corral.config.lifecycle import check_lifecycle, check_mail
    from corral.config.power import check_power

    for key, message in check_lifecycle(cfg.scripts, cfg.health_check) + \
            check_mail(cfg.scripts, cfg.mail) + check_power(cfg.power):
        raise ConfigError(key, message)
    for i, n in enumerate(cfg.nodes):
        if n.boot_time_s is not None and n.boot_time_s < 0:
            raise ConfigError(f"nodes[{i}].boot_time_s", "must be 0 or more seconds")
        if n.cloud and (n.discover or n.mem_mb is None or (
                n.cpus is None and n.cores_per_socket is None)):
            raise ConfigError(f"nodes[{i}].cloud", "a cloud node needs its cpus (or "
                              "topology) and mem_mb, and no discover: it is planned on "
                              "before it exists")
    ck = cfg.checks
    if ck.interval_s < 0:
        raise ConfigError("checks.interval_s", f"must be 0 (off) or more, got {ck.interval_s}")
    if ck.keep_runs < 1:
        raise ConfigError("checks.keep_runs", f"must be 1 or more, got {ck.keep_runs}")
    if not -2147483645 <= ck.nice <= 2147483645:
        raise ConfigError("checks.nice", f"out of range: {ck.nice}")
    if not 0 < ck.min_scaling <= 1:
        raise ConfigError("checks.min_scaling", f"must be in (0, 1], got {ck.min_scaling}")
    if not cfg.partitions:
        raise ConfigError("partitions", "at least one partition is needed")
    defaults = [p.name for p in cfg.partitions if p.default]
    if len(defaults) > 1:
        raise ConfigError("partitions", f"more than one default partition: {defaults}")
    for i, p in enumerate(cfg.partitions):
        if p.nodes.strip().upper() != "ALL":
            try:
                members = expand(p.nodes)
            except ParseError as exc:
                raise ConfigError(f"partitions[{i}].nodes", str(exc)) from None
            if not cfg.accept_unknown_nodes:
                for m in members:
                    if m not in node_names:
                        raise ConfigError(f"partitions[{i}].nodes", f"unknown node {m!r}")
        if (p.max_time_s is not None and p.default_time_s is not None
                and p.default_time_s > p.max_time_s):
            raise ConfigError(f"partitions[{i}].default_time_s", "is larger than max_time_s")
        if p.runtime is not None and p.runtime not in (HOST, VM):
            raise ConfigError(f"partitions[{i}].runtime",
                              f"must be {HOST!r} or {VM!r}, got {p.runtime!r}")
    for key, message in cfg.vm.problems():
        raise ConfigError(f"vm.{key}", message)
    qos_names = {q.name for q in cfg.qos}
    for i, q in enumerate(cfg.qos):
        for other in q.preempt:
            if other not in qos_names:
                raise ConfigError(f"qos[{i}].preempt", f"unknown QOS {other!r}")
    acc_names = {a.name for a in cfg.accounts}
    for i, a in enumerate(cfg.accounts):
        if a.parent is not None and a.parent != "root" and a.parent not in acc_names:
            raise ConfigError(f"accounts[{i}].parent", f"unknown account {a.parent!r}")
        if a.shares < 0:
            raise ConfigError(f"accounts[{i}].shares", "must not be negative")
    for i, u in enumerate(cfg.users):
        for acc in u.accounts:
            if acc not in acc_names:
                raise ConfigError(f"users[{i}].accounts", f"unknown account {acc!r}")
        if u.default_account is not None and u.default_account not in u.accounts:
            raise ConfigError(f"users[{i}].default_account", "must be one of accounts")
    for i, n in enumerate(cfg.nodes):
        _check_node(i, n)
        if n.uplinks:
            raise ConfigError(f"nodes[{i}].uplinks", "is derived from [[switches]]; "
                              "list the switch tree there")
    _check_switches(cfg, node_names)
    c = cfg.controller
    for key in ("schedule_delay_ms", "tick_s", "node_down_after_s", "node_fail_grace_s"):
        if getattr(c, key) < 0:
            raise ConfigError(f"controller.{key}", "must not be negative")
    if not 0 <= c.cycle_max_starts <= 10_000_000:
        raise ConfigError("controller.cycle_max_starts", "must be 0 (no bound) to 10000000")
    cap = cfg.scheduler.max_starts_per_cycle
    if cap is not None and not 1 <= cap <= 10_000_000:
        raise ConfigError("scheduler.max_starts_per_cycle",
                          "must be 1 to 10000000 (leave it out for no cap)")
    if c.event_retention_s < 60:
        raise ConfigError("controller.event_retention_s", "must be at least 60 seconds")
    if not 1 <= c.max_event_streams_per_user <= 10_000:
        raise ConfigError("controller.max_event_streams_per_user", "must be 1 to 10000")
    if not 2 <= c.array_window <= 1_000_000:
        raise ConfigError("controller.array_window", "must be 2 to 1000000")
    if cfg.controller.volcano_images not in ("container", "host"):
        raise ConfigError("controller.volcano_images",
                          f'must be "container" or "host", got {cfg.controller.volcano_images!r}')
    if c.volcano_python and not c.volcano_python.startswith("/"):
        raise ConfigError("controller.volcano_python",
                          f"must be an absolute path, got {c.volcano_python!r}")
    if not 0.5 <= c.lease_s <= 600:
        raise ConfigError("controller.lease_s", "must be between 0.5 and 600 seconds")
    if not (c.standby_refresh_s == 0 or 0.1 <= c.standby_refresh_s <= 3600):
        raise ConfigError("controller.standby_refresh_s",
                          "must be 0 (a cold standby) or between 0.1 and 3600 seconds")
    if not 1 <= c.first_job_id < 2**31:
        raise ConfigError("controller.first_job_id", "must be between 1 and 2147483647")
    if c.tick_s == 0:
        raise ConfigError("controller.tick_s", "must be positive")
    if not (c.gc_freeze_s == 0 or 1 <= c.gc_freeze_s <= 86400):
        raise ConfigError("controller.gc_freeze_s",
                          "must be 0 (never freeze) or between 1 and 86400 seconds")
    if not (c.gc_full_s == 0 or c.gc_freeze_s <= c.gc_full_s <= 30 * 86400):
        raise ConfigError("controller.gc_full_s",
                          "must be 0 (never) or between gc_freeze_s and 2592000 seconds")
    if c.listen is not None:
        host, _, port = c.listen.rpartition(":")
        if not host or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ConfigError("controller.listen", f"expected host:port, got {c.listen!r}")
    if cfg.agent.heartbeat_s <= 0:
        raise ConfigError("agent.heartbeat_s", "must be positive")
    if cfg.controller.node_down_after_s and (
            cfg.controller.node_down_after_s < 2 * cfg.agent.heartbeat_s):
        raise ConfigError("controller.node_down_after_s",
                          "must be at least twice agent.heartbeat_s, or live nodes go DOWN")
    rl = cfg.rate_limit
    if not 1 <= rl.bucket_size <= 10_000_000:
        raise ConfigError("rate_limit.bucket_size", "must be 1 to 10000000")
    if not 1 <= rl.refill_rate <= 10_000_000:
        raise ConfigError("rate_limit.refill_rate", "must be 1 to 10000000")
    if not 0.001 <= rl.refill_period_s <= 3600:
        raise ConfigError("rate_limit.refill_period_s", "must be 0.001 to 3600 seconds")
    if not 1 <= rl.table_size <= 1_000_000:
        raise ConfigError("rate_limit.table_size", "must be 1 to 1000000")
    if cfg.scheduler.max_array_size < 1:
        raise ConfigError("scheduler.max_array_size", "must be at least 1")
    from corral.containers.config import check as check_containers

    for key, problem in check_containers(cfg.containers):
        raise ConfigError(f"containers.{key}", problem)


def _check_switches(cfg: ClusterConfig, node_names: set[str]) -> None:
    """``[[switches]]``: unique names, one parent per switch, no cycles, known nodes, and
    a node on one leaf only."""
    from corral.core.parse.errors import ParseError
    from corral.core.parse.hostlist import expand

    _unique("switches", [s.name for s in cfg.switches])
    seen = {s.name for s in cfg.switches}
    leaves = {n.switch for n in cfg.nodes if n.switch is not None}
    parent: dict[str, str] = {}
    leaf_of: dict[str, str] = {}
    for i, sw in enumerate(cfg.switches):
        for key, text in (("switches", sw.switches), ("nodes", sw.nodes)):
            try:
                members = expand(text) if text else []
            except ParseError as exc:
                raise ConfigError(f"switches[{i}].{key}", str(exc)) from None
            for m in members:
                if key == "switches":
                    if m not in seen and m not in leaves:
                        raise ConfigError(f"switches[{i}].switches", f"unknown switch {m!r}")
                    if m in parent:
                        raise ConfigError(f"switches[{i}].switches",
                                          f"switch {m!r} is already under {parent[m]!r}")
                    parent[m] = sw.name
                else:
                    if m not in node_names:
                        raise ConfigError(f"switches[{i}].nodes", f"unknown node {m!r}")
                    if m in leaf_of:
                        raise ConfigError(f"switches[{i}].nodes",
                                          f"node {m!r} is already on {leaf_of[m]!r}")
                    leaf_of[m] = sw.name
    for nm in parent:
        cur, hops = nm, 0
        while cur in parent:
            cur, hops = parent[cur], hops + 1
            if cur == nm or hops > len(parent):
                raise ConfigError("switches", f"the switch tree has a cycle through {nm!r}")
    for i, n in enumerate(cfg.nodes):
        if n.switch is None:
            continue
        for nm in expand(n.name):
            if leaf_of.get(nm, n.switch) != n.switch:
                raise ConfigError(f"nodes[{i}].switch", f"node {nm!r} is on {leaf_of[nm]!r} "
                                  "in [[switches]]")


def _check_node(i: int, n: NodeConfig) -> None:
    for key in ("cpus", "sockets", "cores_per_socket", "threads_per_core"):
        v = getattr(n, key)
        if v is not None and v < 1:
            raise ConfigError(f"nodes[{i}].{key}", "must be at least 1")
    if not n.discover:
        if n.cpus is None and n.cores_per_socket is None:
            raise ConfigError(f"nodes[{i}]", "give cpus (or sockets/cores_per_socket) "
                              "or set discover = true")
        if n.mem_mb is None:
            raise ConfigError(f"nodes[{i}].mem_mb", "is required unless discover = true")


def parse_config(data: Mapping[str, Any], path: str | None = None) -> ClusterConfig:
    """A validated ``ClusterConfig`` from already-parsed TOML data."""
    try:
        cfg = build(ClusterConfig, data)
        validate(cfg)
    except ConfigError as exc:
        if path and not exc.path:
            raise ConfigError(exc.key, exc.message, path) from None
        raise
    return cfg


def load_config(path: str | Path | None) -> ClusterConfig:
    """Read ``corral.toml``; ``None`` gives the defaults (one machine, discovered)."""
    if path is None:
        return parse_config({})
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError("", f"cannot read the configuration: {exc.strerror}", str(p)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("", f"not valid TOML: {exc}", str(p)) from None
    return parse_config(data, str(p))


def config_to_json(cfg: ClusterConfig) -> dict[str, Any]:
    """The configuration as plain JSON types (enums as values)."""
    def conv(v: Any) -> Any:
        if isinstance(v, enum.Enum):
            return v.value
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {f.name: conv(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, (tuple, list)):
            return [conv(x) for x in v]
        return v

    out: dict[str, Any] = conv(cfg)
    return out
