"""HTTP pieces of the Kubernetes API subset: Status errors, selectors, Tables, merge patch.

* ``KubeError`` renders as a ``v1`` ``Status`` (``reason`` NotFound, AlreadyExists,
  Invalid with ``details.causes`` [{field, reason, message}], Forbidden, ...), which
  kubectl prints as ``Error from server (Invalid): ...``.
* ``field_selector``/``label_selector`` filter lists (equality forms, ``!=``, ``in``,
  ``notin``, existence), as the API server does for the fields Corral's objects have.
* ``table`` builds a ``meta.k8s.io/v1`` ``Table`` when the client asks for one
  (``Accept: ...;as=Table``): kubectl's columns come from the server.
* ``merge_patch`` is RFC 7386 (JSON merge patch; kubectl's patch for custom resources).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from corral.controller.errors import ApiError

_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
            405: "MethodNotAllowed", 409: "AlreadyExists", 415: "UnsupportedMediaType",
            422: "Invalid", 500: "InternalError", 503: "ServiceUnavailable"}


class KubeError(Exception):
    def __init__(self, code: int, message: str, *, reason: str | None = None,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASONS.get(code, "BadRequest")
        self.details = details

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                               "status": "Failure", "message": self.message,
                               "reason": self.reason, "code": self.code}
        if self.details:
            out["details"] = self.details
        return out


def from_api_error(exc: ApiError) -> KubeError:
    code = {"rejected": 422}.get(exc.code, exc.status)
    return KubeError(code, exc.message)


def not_found(kind: str, group: str, name: str) -> KubeError:
    what = f"{kind}.{group}" if group else kind
    return KubeError(404, f'{what} "{name}" not found',
                     details={"name": name, "group": group, "kind": kind})


def invalid(kind: str, group: str, name: str, causes: list[tuple[str, str, str]]
            ) -> KubeError:
    text = ", ".join(f"{f}: {m}" if f else m for f, _r, m in causes)
    return KubeError(422, f'{kind}.{group} "{name}" is invalid: {text}', details={
        "name": name, "group": group, "kind": kind,
        "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes]})


def dig(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def field_selector(text: str | None) -> Callable[[dict[str, Any]], bool]:
    rules: list[tuple[str, str, bool]] = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        m = re.match(r"^([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*)$", part)
        if not m:
            raise KubeError(400, f"invalid field selector {part!r}")
        rules.append((m.group(1), m.group(3), m.group(2) != "!="))

    def match(obj: dict[str, Any]) -> bool:
        for path, value, eq in rules:
            got = dig(obj, path)
            if (str(got) if got is not None else "") == value:
                if not eq:
                    return False
            elif eq:
                return False
        return True

    return match


def _split_top(text: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [p.strip() for p in out if p.strip()]


def label_selector(text: str | None) -> Callable[[dict[str, str]], bool]:
    """Equality (``a=b``, ``a!=b``), set (``a in (x,y)``, ``a notin (x)``) and existence
    (``a``, ``!a``) requirements, all of which must hold."""
    tests: list[tuple[str, str, frozenset[str]]] = []  # (op, key, values)
    for part in _split_top(text or ""):
        m = re.match(r"^([^\s!=()]+)\s+(in|notin)\s+\((.*)\)$", part)
        if m:
            tests.append((m.group(2), m.group(1),
                          frozenset(v.strip() for v in m.group(3).split(","))))
            continue
        m = re.match(r"^([^\s!=]+)\s*(==|=|!=)\s*([^\s]*)$", part)
        if m:
            tests.append(("notin" if m.group(2) == "!=" else "in", m.group(1),
                          frozenset([m.group(3)])))
            continue
        m = re.match(r"^(!?)([^\s!=()]+)$", part)
        if not m:
            raise KubeError(400, f"invalid label selector {part!r}")
        tests.append(("absent" if m.group(1) else "exists", m.group(2), frozenset()))

    def match(labels: dict[str, str]) -> bool:
        for op, key, values in tests:
            if op == "in" and labels.get(key) not in values:
                return False
            if op == "notin" and labels.get(key) in values:
                return False
            if op == "exists" and key not in labels:
                return False
            if op == "absent" and key in labels:
                return False
        return True

    return match


def wants_table(accept: str) -> bool:
    return "as=Table" in accept


Column = tuple[str, str, int, Callable[[dict[str, Any]], Any]]


def table(columns: list[Column], objects: list[dict[str, Any]], rv: str,
          include: str | None, header: bool = True) -> dict[str, Any]:
    rows = []
    for obj in objects:
        if include == "Object":
            inner: dict[str, Any] = obj
        elif include == "None":
            inner = {}
        else:
            inner = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                     "metadata": obj.get("metadata", {})}
        rows.append({"cells": [fn(obj) for _n, _t, _p, fn in columns], "object": inner})
    out: dict[str, Any] = {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
                           "metadata": {"resourceVersion": rv}, "rows": rows}
    out["columnDefinitions"] = [
        {"name": n, "type": t, "format": "name" if n == "NAME" else "", "description": "",
         "priority": p} for n, t, p, _fn in columns] if header else []
    return out


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out
