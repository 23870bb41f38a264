"""``POST /images/pull`` (``corral image pull REF [--nodes ...]``): ask node agents to put a
registry image into their image cache before jobs need it.

The reference is checked as at submit (a registry image, an allowed registry); each named
node must be known and connected; the agent pulls in a child process and reports the
result in its next heartbeat (``corral images``). Any user may pre-pull: the caches are
shared and bounded by ``[containers] cache_max_mb`` (LRU).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from corral.config.schema import ClusterConfig
from corral.containers.spec import ContainerError, parse_image
from corral.controller.auth import Identity
from corral.controller.errors import ApiError


class _Conn(Protocol):
    def send(self, msg: dict[str, Any]) -> None: ...


def pull_images(conns: Mapping[str, _Conn], known: set[str], cfg: ClusterConfig,
                who: Identity, ref_text: str, nodes: list[str] | None) -> dict[str, Any]:
    """Send the pull to the agents; ``{"ref", "nodes": sent to, "not_connected"}``."""
    del who  # any authenticated user (the route checked the identity)
    cc = cfg.containers
    if not cc.enabled:
        raise ApiError("invalid", "container jobs are disabled on this cluster")
    try:
        ref = parse_image(ref_text)
    except ContainerError as exc:
        raise ApiError("invalid", str(exc)) from None
    if ref.kind != "docker":
        raise ApiError("invalid", f"{ref.canonical} is not a registry image (only those are "
                                  "cached on the nodes)")
    if cc.allowed_registries and ref.registry not in cc.allowed_registries:
        raise ApiError("invalid", f"image registry {ref.registry} is not allowed here")
    names = sorted(set(nodes)) if nodes else sorted(conns)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ApiError("not_found", f"unknown node {unknown[0]!r}")
    sent, missing = [], []
    for name in names:
        conn = conns.get(name)
        if conn is None:
            missing.append(name)
            continue
        conn.send({"t": "image_pull", "ref": ref.canonical})
        sent.append(name)
    return {"ref": ref.canonical, "nodes": sent, "not_connected": missing}
