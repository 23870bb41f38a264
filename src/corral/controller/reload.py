"""``corral config reload`` / ``scontrol reconfigure``: apply a changed ``corral.toml``
without a restart, saying what changed and what waits for one.

The controller re-reads the file it was started with (``--config``; never a path a client
names), validates it as at start (a bad file changes nothing and the error names the
key), and compares it with the running configuration table by table. Applied at once:
accounts, users, QOS (the run-time ``sacctmgr`` overlay stays on top), partitions,
licenses, ``[scheduler]``, ``[weights]``, ``[preemption]``, ``[cgroup]``, ``[scripts]``,
``[mail]``, ``[health_check]``, ``[power]``, ``[checks]``, ``accept_unknown_nodes`` and the
``[controller]`` timings. Kept until a restart (the running values stay): ``[[nodes]]``,
``[[switches]]``, ``cluster_name``, ``operators``, ``state_dir``, ``[agent]`` (agents read
their own file) and ``[controller]`` ``listen``, ``socket``, ``database_url``, ``tls``,
``tls_names``, ``name``, ``lease_s``, ``max_request_mb``.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral.controller.auth import Identity
from corral.controller.errors import ApiError

if TYPE_CHECKING:
    from corral.controller.service import Controller

log = logging.getLogger("corral.reload")

RESTART_KEYS = ("nodes", "switches", "cluster_name", "operators", "state_dir", "agent")
RESTART_CONTROLLER = ("listen", "socket", "database_url", "tls", "tls_names", "name",
                      "lease_s", "max_request_mb")


def reload(ctl: Controller, who: Identity) -> dict[str, Any]:
    from corral.config.load import ConfigError, config_to_json, load_config
    from corral.controller.audit import outcome_of, record

    try:
        if not who.is_admin:
            raise ApiError("forbidden", f"user {who.user} is not an operator",
                           slurm="Access/permission denied")
        path: Path | None = getattr(ctl, "config_path", None)
        if path is None:
            raise ApiError("invalid", "this controller was started without --config: "
                           "there is no file to reload")
        try:
            new = load_config(path)
        except ConfigError as exc:
            raise ApiError("invalid", str(exc)) from None
        except OSError as exc:
            raise ApiError("invalid", f"cannot read {path}: {exc.strerror or exc}") from None
        old = ctl.livecfg.base
        old_j, new_j = config_to_json(old), config_to_json(new)
        changed = sorted(k for k in new_j if new_j[k] != old_j.get(k))
        restart = [k for k in changed if k in RESTART_KEYS]
        keep: dict[str, Any] = {k: getattr(old, k) for k in RESTART_KEYS}
        cc_changes = {f: getattr(old.controller, f) for f in RESTART_CONTROLLER
                      if getattr(old.controller, f) != getattr(new.controller, f)}
        restart += [f"controller.{f}" for f in sorted(cc_changes)]
        base = dataclasses.replace(new, **keep,
                                   controller=dataclasses.replace(new.controller,
                                                                  **cc_changes))
        live = [k for k in changed if k not in RESTART_KEYS and not (
            k == "controller" and base.controller == old.controller)]
        prev = ctl.livecfg.base
        ctl.livecfg.base = base
        try:
            ctl.livecfg.reapply()
        except ApiError:
            ctl.livecfg.base = prev
            raise
    except ApiError as exc:
        record(ctl.store, who, "config_reload", "corral.toml", {}, outcome_of(exc))
        raise
    answer = {"file": str(path), "applied": live, "restart_needed": restart}
    record(ctl.store, who, "config_reload", "corral.toml", answer)
    log.info("configuration reloaded from %s: applied %s; needs a restart: %s", path,
             live or "nothing", restart or "nothing")
    return answer
