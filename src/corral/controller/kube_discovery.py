"""Kubernetes discovery and OpenAPI documents for the API subset Corral serves.

``/api``, ``/api/v1``, ``/apis``, ``/apis/<group>[/<version>]`` (legacy discovery; kubectl
falls back to it when the answer is not the aggregated form), ``/version``, and
``/openapi/v3`` with one document per group version. The Volcano documents carry the CRD
schemas of ``shared/schemas/volcano`` (packaged as ``corral/frontends/volcano_crds.json``,
written by ``scripts/volcano-crds``) and a PATCH operation with the ``fieldValidation``
parameter, so ``kubectl apply --validate=strict`` asks the server to validate (Corral
checks every field and refuses unknown ones with their path).
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

from corral import __version__

VC_BATCH = ("batch.volcano.sh", "v1alpha1")
VC_SCHED = ("scheduling.volcano.sh", "v1beta1")

# (plural, kind, namespaced, verbs, short names)
CORE_RESOURCES = [
    ("pods", "Pod", True, ["get", "list", "watch"], ["po"]),
    ("pods/log", "Pod", True, ["get"], []),
    ("nodes", "Node", False, ["get", "list", "watch"], ["no"]),
    ("namespaces", "Namespace", False, ["get", "list", "watch"], ["ns"]),
    ("events", "Event", True, ["get", "list", "watch"], ["ev"]),
]
BATCH_RESOURCES = [
    ("jobs", "Job", True, ["create", "delete", "get", "list", "patch", "update", "watch"],
     ["vcjob", "vj"]),
    ("jobs/status", "Job", True, ["get"], []),
]
SCHED_RESOURCES = [("queues", "Queue", False, ["get", "list", "watch"], ["q", "queue-v1beta1"])]


def _resource_list(gv: str, items: list[tuple[str, str, bool, list[str], list[str]]]
                   ) -> dict[str, Any]:
    out = []
    for plural, kind, namespaced, verbs, short in items:
        r: dict[str, Any] = {"name": plural, "singularName": "" if "/" in plural
                             else kind.lower(), "namespaced": namespaced, "kind": kind,
                             "verbs": verbs}
        if short:
            r["shortNames"] = short
        if plural == "jobs":
            r["categories"] = ["vc", "all"]
        out.append(r)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
            "resources": out}


def api_versions(host: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}]}


def core_resources() -> dict[str, Any]:
    return _resource_list("v1", CORE_RESOURCES)


def group(name: str, version: str) -> dict[str, Any]:
    gv = {"groupVersion": f"{name}/{version}", "version": version}
    return {"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": [gv],
            "preferredVersion": gv}


def groups() -> dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1",
            "groups": [group(*VC_BATCH), group(*VC_SCHED)]}


def group_resources(name: str, version: str) -> dict[str, Any] | None:
    if (name, version) == VC_BATCH:
        return _resource_list(f"{name}/{version}", BATCH_RESOURCES)
    if (name, version) == VC_SCHED:
        return _resource_list(f"{name}/{version}", SCHED_RESOURCES)
    return None


def version() -> dict[str, Any]:
    return {"major": "1", "minor": "32", "gitVersion": f"v1.32.0+corral-{__version__}",
            "gitCommit": "", "gitTreeState": "clean", "buildDate": "", "goVersion": "",
            "compiler": "corral", "platform": "linux/amd64"}


@lru_cache(maxsize=1)
def crds() -> dict[str, Any]:
    """``{kind: openAPIV3Schema}`` of the Volcano CRDs (packaged copy)."""
    text = resources.files("corral.frontends").joinpath("volcano_crds.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


def _schema_name(group_name: str, version_name: str, kind: str) -> str:
    rev = ".".join(reversed(group_name.split(".")))
    return f"{rev}.{version_name}.{kind}"


def _op(gvk: dict[str, str], action: str, params: list[dict[str, Any]]) -> dict[str, Any]:
    return {"operationId": f"{action}{gvk['kind']}", "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": gvk, "parameters": params,
            "responses": {"200": {"description": "OK"}}}


_FIELD_VALIDATION = {"name": "fieldValidation", "in": "query", "schema": {"type": "string",
                     "uniqueItems": True}}


def openapi_root(prefix: str) -> dict[str, Any]:
    paths = ["api/v1", f"apis/{VC_BATCH[0]}/{VC_BATCH[1]}", f"apis/{VC_SCHED[0]}/{VC_SCHED[1]}"]
    return {"paths": {p: {"serverRelativeURL": f"{prefix}/openapi/v3/{p}?hash={__version__}"}
                      for p in paths}}


def openapi_doc(path: str) -> dict[str, Any] | None:
    """The OpenAPI v3 document of one group version (``apis/batch.volcano.sh/v1alpha1``)."""
    parts = path.strip("/").split("/")
    if parts == ["api", "v1"]:
        g, v, kinds = "", "v1", [("pods", "Pod", True)]
        schemas: dict[str, Any] = {"io.k8s.api.core.v1.Pod": {
            "type": "object", "x-kubernetes-group-version-kind": [
                {"group": "", "version": "v1", "kind": "Pod"}]}}
        prefix = "/api/v1"
    elif len(parts) == 3 and parts[0] == "apis" and (parts[1], parts[2]) in (VC_BATCH, VC_SCHED):
        g, v = parts[1], parts[2]
        kinds = [("jobs", "Job", True)] if (g, v) == VC_BATCH else [("queues", "Queue", False)]
        schemas = {}
        for _plural, kind, _ns in kinds:
            schema = dict(crds()[kind])
            schema["x-kubernetes-group-version-kind"] = [{"group": g, "version": v,
                                                          "kind": kind}]
            schemas[_schema_name(g, v, kind)] = schema
        prefix = f"/apis/{g}/{v}"
    else:
        return None
    out_paths: dict[str, Any] = {}
    for plural, kind, namespaced in kinds:
        gvk = {"group": g, "version": v, "kind": kind}
        base = f"{prefix}/namespaces/{{namespace}}/{plural}" if namespaced else \
            f"{prefix}/{plural}"
        out_paths[base] = {"get": _op(gvk, "list", []),
                           "post": _op(gvk, "post", [_FIELD_VALIDATION])}
        out_paths[base + "/{name}"] = {"get": _op(gvk, "get", []),
                                       "put": _op(gvk, "put", [_FIELD_VALIDATION]),
                                       "patch": _op(gvk, "patch", [_FIELD_VALIDATION]),
                                       "delete": _op(gvk, "delete", [])}
    return {"openapi": "3.0.0", "info": {"title": "Corral", "version": __version__},
            "paths": out_paths, "components": {"schemas": schemas}}


# ---- OpenAPI v2 (kubectl before 1.29 reads it, in protobuf only) -------------------------
#
# A minimal gnostic ``openapi.v2.Document``: for each Volcano Job path its PATCH and POST
# operations with the ``fieldValidation`` query parameter and the
# ``x-kubernetes-group-version-kind`` extension, which is what kubectl's query-parameter
# check looks for (it then validates on the server); no definitions, so older kubectl
# (1.20) has no client-side schema for the Job and leaves the checks to the server.
# Field numbers from gnostic's openapiv2/OpenAPIv2.proto.

OPENAPI_V2_PB = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _v2_operation(op_id: str, gvk: dict[str, str]) -> bytes:
    query = _field(2, "query") + _field(4, "fieldValidation") + _field(6, "string")
    param = _field(8, _field(1, _field(2, _field(3, query))))  # ParametersItem.parameter
    ext_yaml = "".join(f"{k}: {v!r}\n" if not v else f"{k}: {v}\n"
                       for k, v in sorted(gvk.items()))
    ext = _field(13, _field(1, "x-kubernetes-group-version-kind")
                 + _field(2, _field(2, ext_yaml)))
    return _field(5, op_id) + param + ext


def openapi_v2_protobuf() -> bytes:
    g, v = VC_BATCH
    gvk = {"group": g, "version": v, "kind": "Job"}
    base = f"/apis/{g}/{v}/namespaces/{{namespace}}/jobs"
    paths = _field(2, _field(1, base) + _field(2, _field(4, _v2_operation("createJob", gvk))))
    paths += _field(2, _field(1, base + "/{name}")
                    + _field(2, _field(3, _v2_operation("replaceJob", gvk))
                             + _field(8, _v2_operation("patchJob", gvk))))
    info = _field(1, "Corral") + _field(2, __version__)
    return _field(1, "2.0") + _field(2, info) + _field(8, paths)
