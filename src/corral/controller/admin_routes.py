"""REST routes of run-time administration (``corral.controller.livecfg``; operators).

``POST /api/v1/admin/{kind}`` adds an entry (``kind``: ``accounts``, ``users``, ``qos``;
the body is the entry as ``corral.toml`` writes it, ``name`` included), ``PATCH
/api/v1/admin/{kind}/{name}`` changes the fields it names (``limits`` field by field),
``DELETE /api/v1/admin/{kind}/{name}`` removes it; ``PATCH /api/v1/partitions/{name}``
sets a partition's ``state``. Reading is ``GET /api/v1/config``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field

from corral.controller.auth import Identity
from corral.controller.errors import ApiError


class AdminEntry(BaseModel):
    """An account, user or QOS as ``corral.toml`` gives it (``docs/configuration.md``)."""

    model_config = ConfigDict(extra="allow")
    name: Annotated[str, Field(max_length=64)] | None = None


class PowerAction(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    action: Literal["up", "down"]


class PartitionChange(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    state: Literal["UP", "DOWN", "DRAIN", "INACTIVE"]


def _ref(name: str) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{name}"}}}}}


def _publish(app: FastAPI) -> None:
    base = app.openapi

    def openapi() -> dict[str, Any]:
        schema: dict[str, Any] = base()
        comps = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in (AdminEntry, PartitionChange, PowerAction):
            if model.__name__ not in comps:
                comps[model.__name__] = model.model_json_schema()
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def merge_fields(current: dict[str, Any], fields: dict[str, Any]) -> dict[str, Any]:
    """``current`` with ``fields`` set; a ``limits`` object changes only the limits it
    names (``null`` clears one)."""
    out = dict(current)
    for k, v in fields.items():
        if k == "limits" and isinstance(v, dict) and isinstance(out.get("limits"), dict):
            out["limits"] = {**out["limits"], **v}
        else:
            out[k] = v
    return out


def admin_change(ctl: Any, who: Identity, kind: str, name: str,
                 body: dict[str, Any] | None, mode: str) -> dict[str, Any] | None:
    """``mode``: ``add`` (must not exist), ``modify`` (must exist; merge), ``delete``."""
    from corral.controller.livecfg import entry_data

    live = ctl.livecfg
    if kind not in ("accounts", "users", "qos"):
        raise ApiError("not_found", f"unknown kind {kind!r} (accounts, users, qos)")
    current = live.find(kind, name)
    if mode == "add":
        if current is not None:
            raise ApiError("conflict", f"{kind[:-1] if kind != 'qos' else 'qos'} {name} "
                           "already exists", slurm="Nothing new added.")
        got = live.put(kind, name, dict(body or {}, name=name), who, f"{kind}_add")
    elif current is None:
        raise ApiError("not_found", f"no {kind[:-1] if kind != 'qos' else 'qos'} {name}",
                       slurm="Nothing modified" if mode == "modify" else "Nothing deleted")
    elif mode == "modify":
        got = live.put(kind, name, merge_fields(entry_data(current), body or {}), who,
                       f"{kind}_modify")
    else:
        live.put(kind, name, None, who, f"{kind}_delete")
        return None
    return entry_data(got)


def mount(app: FastAPI, ctl: Any, operator: Callable[[Any], Identity],
          read_body: Callable[[Any], Any], answer: Callable[[Any], Any], prefix: str) -> None:
    _publish(app)

    async def body_of(request: Request) -> dict[str, Any]:
        body = await read_body(request)
        if not isinstance(body, dict):
            raise ApiError("invalid", "the body must be a JSON object")
        return body

    @app.post(prefix + "/admin/{kind}", summary="Add an account, user or QOS (operators)",
              openapi_extra=_ref("AdminEntry"))
    async def admin_add(request: Request, kind: str) -> Any:
        who = operator(request)
        body = await body_of(request)
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError("invalid", "bad field name: required")
        return answer(admin_change(ctl, who, kind, name, body, "add"))

    @app.patch(prefix + "/admin/{kind}/{name}",
               summary="Change an account, user or QOS (operators)",
               openapi_extra=_ref("AdminEntry"))
    async def admin_modify(request: Request, kind: str, name: str) -> Any:
        who = operator(request)
        body = await body_of(request)
        body.pop("name", None)
        return answer(admin_change(ctl, who, kind, name, body, "modify"))

    @app.delete(prefix + "/admin/{kind}/{name}",
                summary="Delete an account, user or QOS (operators)")
    async def admin_delete(request: Request, kind: str, name: str) -> Any:
        who = operator(request)
        admin_change(ctl, who, kind, name, None, "delete")
        return answer({"deleted": name})

    @app.post(prefix + "/config/reload",
              summary="Re-read corral.toml and apply what can change live (operators)")
    async def config_reload(request: Request) -> Any:
        from corral.controller.reload import reload

        return answer(reload(ctl, operator(request)))

    @app.post(prefix + "/nodes/{name}/power", summary="Power a node up or down (operators)",
              openapi_extra=_ref("PowerAction"))
    async def node_power(request: Request, name: str) -> Any:
        from pydantic import ValidationError

        operator(request)
        body = await body_of(request)
        try:
            PowerAction.model_validate(body)
        except ValidationError as exc:
            raise ApiError("invalid", f"bad field action: {exc.errors()[0].get('msg')}") \
                from None
        return answer(ctl.power.operator(name, body["action"]).to_api())

    @app.patch(prefix + "/partitions/{name}", summary="Set a partition's state (operators)",
               openapi_extra=_ref("PartitionChange"))
    async def partition_update(request: Request, name: str) -> Any:
        from pydantic import ValidationError

        who = operator(request)
        body = await body_of(request)
        try:
            PartitionChange.model_validate(body)
        except ValidationError as exc:
            raise ApiError("invalid", f"bad field state: {exc.errors()[0].get('msg')}") \
                from None
        ctl.livecfg.set_partition_state(name, body["state"], who)
        return answer({"name": name, "state": body["state"]})
