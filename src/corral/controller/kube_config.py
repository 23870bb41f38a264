"""A kubeconfig for the caller (``corral kubeconfig``, ``GET /api/v1/kubeconfig``).

kubectl cannot use a Unix socket, and it sends no bearer token over plain HTTP: it needs
the controller's TCP listener (``[controller] listen`` or ``corral up --listen``) with TLS
(``[controller] tls = true``). The kubeconfig names the listener's URL plus ``/k8s``, the
cluster CA (``ca.pem``, embedded) and a token minted for the caller (the same tokens as
``corral token``), with the context's namespace ``default`` (the caller's default
account).
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

import yaml

from corral.controller.errors import ApiError

if TYPE_CHECKING:
    from corral.controller.auth import Identity
    from corral.controller.service import Controller


def kubeconfig_for(ctl: Controller, who: Identity, ttl_s: int, prefix: str) -> dict[str, Any]:
    try:
        info = json.loads((ctl.state_dir / "controller.json").read_text())
    except (OSError, ValueError):
        info = {}
    url = info.get("url")
    if not url or ctl.token_minter is None:
        raise ApiError("conflict", "the controller has no TCP listener and kubectl cannot use "
                                   "the Unix socket: start it with --listen HOST:PORT (or "
                                   "[controller] listen) and [controller] tls = true")
    cluster: dict[str, Any] = {"server": url.rstrip("/") + prefix}
    warning = ""
    if url.startswith("https://") and info.get("ca_file"):
        pem = (ctl.state_dir / "ca.pem").read_bytes()
        cluster["certificate-authority-data"] = base64.b64encode(pem).decode()
    else:
        warning = ("the controller serves plain HTTP: kubectl sends no token over it; set "
                   "[controller] tls = true")
    token = ctl.token_minter(who.user, who.uid, who.gid, ttl_s)
    name = ctl.cfg.cluster_name
    user = f"{who.user}@{name}"
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": name,
           "clusters": [{"name": name, "cluster": cluster}],
           "users": [{"name": user, "user": {"token": token}}],
           "contexts": [{"name": name, "context": {"cluster": name, "user": user,
                                                   "namespace": "default"}}]}
    return {"kubeconfig": yaml.safe_dump(doc, sort_keys=False), "server": cluster["server"],
            "warning": warning, "ttl_s": ttl_s}
