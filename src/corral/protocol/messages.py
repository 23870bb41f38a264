"""Frame encoding and the NodeSpec wire form (see the package docstring for the messages)."""

from __future__ import annotations

import json
from typing import Any

from corral.core.model.node import GpuSpec, NodeSpec, NumaDomain

PROTOCOL_VERSION = 1


class ProtocolError(ValueError):
    pass


class Encoded:
    """A message already in its JSON text, for one sent to many agents (a step's launch
    to each of its nodes): encoded once, spliced into each frame."""

    __slots__ = ("text",)

    def __init__(self, msg: dict[str, Any]) -> None:
        self.text = json.dumps(msg, separators=(",", ":"))


def encode_frame(msgs: list[dict[str, Any]] | list[dict[str, Any] | Encoded]) -> str:
    if not any(type(m) is Encoded for m in msgs):
        return json.dumps({"v": PROTOCOL_VERSION, "msgs": msgs}, separators=(",", ":"))
    parts = [m.text if isinstance(m, Encoded) else json.dumps(m, separators=(",", ":"))
             for m in msgs]
    return f'{{"v":{PROTOCOL_VERSION},"msgs":[{",".join(parts)}]}}'


def decode_frame(data: str | bytes) -> list[dict[str, Any]]:
    try:
        frame = json.loads(data)
    except ValueError as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    if not isinstance(frame, dict) or not isinstance(frame.get("msgs"), list):
        raise ProtocolError("a frame is an object with a 'msgs' list")
    version = frame.get("v")
    if version != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {version!r} is not {PROTOCOL_VERSION}")
    msgs: list[dict[str, Any]] = []
    for m in frame["msgs"]:
        if not isinstance(m, dict) or not isinstance(m.get("t"), str):
            raise ProtocolError("every message is an object with a 't' string")
        msgs.append(m)
    return msgs


def node_spec_to_json(spec: NodeSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "sockets": spec.sockets,
        "cores_per_socket": spec.cores_per_socket,
        "threads_per_core": spec.threads_per_core,
        "mem_mb": spec.mem_mb,
        "gpus": [{"index": g.index, "type": g.type, "mem_mb": g.mem_mb, "numa": g.numa,
                  "uuid": g.uuid, "device": g.device} for g in spec.gpus],
        "numa": [{"id": d.id, "cores": list(d.cores), "mem_mb": d.mem_mb} for d in spec.numa],
        "features": sorted(spec.features),
        "gres": [[k, v] for k, v in spec.gres],
        "switch": spec.switch,
        "uplinks": list(spec.uplinks),
        "weight": spec.weight,
        "arch": spec.arch,
        "core_cpus": [list(c) for c in spec.core_cpus],
    }


def node_spec_from_json(d: dict[str, Any]) -> NodeSpec:
    try:
        return NodeSpec(
            name=str(d["name"]),
            sockets=int(d.get("sockets", 1)),
            cores_per_socket=int(d.get("cores_per_socket", 1)),
            threads_per_core=int(d.get("threads_per_core", 1)),
            mem_mb=int(d.get("mem_mb", 0)),
            gpus=tuple(GpuSpec(index=int(g["index"]), type=str(g.get("type", "gpu")),
                               mem_mb=int(g.get("mem_mb", 0)), numa=g.get("numa"),
                               uuid=str(g.get("uuid", "")), device=str(g.get("device", "")))
                  for g in d.get("gpus") or ()),
            numa=tuple(NumaDomain(id=int(n["id"]), cores=tuple(int(c) for c in n["cores"]),
                                  mem_mb=int(n.get("mem_mb", 0))) for n in d.get("numa") or ()),
            features=frozenset(str(f) for f in d.get("features") or ()),
            gres=tuple((str(k), int(v)) for k, v in d.get("gres") or ()),
            switch=d.get("switch"),
            uplinks=tuple(str(s) for s in d.get("uplinks") or ()),
            weight=int(d.get("weight", 1)),
            arch=str(d.get("arch", "x86_64")),
            core_cpus=tuple(tuple(int(x) for x in c) for c in d.get("core_cpus") or ()),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"bad node description: {exc}") from None
