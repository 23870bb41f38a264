"""Node image caches seen from the controller: ``POST /images/pull`` (``corral image pull
REF [--nodes ...]``) asks node agents to put a registry image into their cache before jobs
need it; ``refresh_preferences`` makes the nodes that hold a pending job's image the ones
its placement tries first.

The reference is checked as at submit (a registry image, an allowed registry); each named
node must be known and connected; the agent pulls in a child process and reports the
result in its next heartbeat (``corral images``). Any user may pre-pull: the caches are
shared and bounded by ``[containers] cache_max_mb`` (LRU).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from corral.config.schema import ClusterConfig
from corral.containers.spec import ContainerError, parse_image
from corral.controller.auth import Identity
from corral.controller.errors import ApiError


class _Conn(Protocol):
    def send(self, msg: dict[str, Any]) -> None: ...


def pull_images(conns: Mapping[str, _Conn], known: set[str], cfg: ClusterConfig,
                who: Identity, ref_text: str, nodes: list[str] | None) -> dict[str, Any]:
    """Send the pull to the agents; ``{"ref", "nodes": sent to, "not_connected"}``. Any
    authenticated user may pre-pull; a SIF is opened on the nodes with that user's ids
    (what they cannot read is not unpacked)."""
    cc = cfg.containers
    if not cc.enabled:
        raise ApiError("invalid", "container jobs are disabled on this cluster")
    try:
        ref = parse_image(ref_text)
    except ContainerError as exc:
        raise ApiError("invalid", str(exc)) from None
    if ref.kind not in ("docker", "sif"):
        raise ApiError("invalid", f"{ref.canonical} is not a registry image or a SIF (only "
                                  "those are cached on the nodes)")
    if ref.kind == "docker" and cc.allowed_registries \
            and ref.registry not in cc.allowed_registries:
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
        msg: dict[str, Any] = {"t": "image_pull", "ref": ref.canonical}
        if ref.kind == "sif":  # the nodes open the file as the asking user, never as root
            msg.update({"uid": who.uid, "gid": who.gid})
        conn.send(msg)
        sent.append(name)
    return {"ref": ref.canonical, "nodes": sent, "not_connected": missing}


def image_of(rec: Any) -> str:
    """The canonical reference of a job's cached image: a registry image, or a SIF (the
    nodes report its sandbox under the file's path); "" for none or a directory/bundle."""
    text = rec.sub.extra.get("container")
    if not text:
        return ""
    try:
        data = json.loads(text)
    except ValueError:
        return ""
    return str(data.get("image") or "") if data.get("kind") in ("docker", "sif") else ""


def holders(nodes: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Image reference -> the nodes whose cache holds it (from the agents' reports)."""
    out: dict[str, list[str]] = {}
    for name, node in sorted(nodes.items()):
        for img in getattr(node, "images", None) or ():
            for ref in img.get("refs") or ():
                out.setdefault(str(ref), []).append(name)
    return {k: tuple(v) for k, v in out.items()}


def refresh_preferences(pending: Iterable[Any], nodes: Mapping[str, Any]) -> int:
    """Set each pending container job's preferred nodes (those holding its image); the
    core tries them first and falls back to any other (a preference, never a wait).
    Returns how many jobs changed."""
    have: dict[str, tuple[str, ...]] | None = None
    changed = 0
    for rec in pending:
        ref = image_of(rec)
        if not ref:
            continue
        if have is None:
            have = holders(nodes)
        prefer = have.get(ref, ())
        if prefer != rec.prefer:
            rec.prefer = prefer
            rec.touch()
            changed += 1
    return changed
