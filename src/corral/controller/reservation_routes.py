"""REST routes of advance reservations (``corral.controller.reservations``).

``GET /api/v1/reservations`` (anyone), ``POST /api/v1/reservations`` (create),
``PATCH /api/v1/reservations/{name}`` (update) and ``DELETE /api/v1/reservations/{name}``
(operators). Bodies: ``name``, ``start_time`` (epoch seconds or ``"now"``), ``end_time`` or
``duration_s``, ``nodes`` (a host list or ``ALL``) or ``node_count``, ``partition``,
``users``, ``accounts`` (lists; in an update ``"+name"``/``"-name"`` add and remove),
``flags`` (likewise).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field

from corral.controller.auth import Identity
from corral.controller.errors import ApiError

_Name = Annotated[str, Field(max_length=64)]
_Names = Annotated[list[_Name], Field(max_length=10000)]


class ReservationBody(BaseModel):
    """A reservation to create, or the fields of one to change."""

    model_config = ConfigDict(strict=True, extra="forbid")
    name: _Name | None = None
    start_time: Annotated[float, Field(ge=0, lt=1e11)] | Annotated[str, Field(
        pattern="^now$")] | None = None
    end_time: Annotated[float, Field(ge=0, lt=1e11)] | Annotated[str, Field(
        pattern="^now$")] | None = None
    duration_s: Annotated[float, Field(gt=0, lt=1e10)] | None = None
    nodes: Annotated[str, Field(max_length=65536)] | None = None
    node_count: Annotated[int, Field(gt=0, le=100000)] | None = None
    partition: _Name | None = None
    users: _Names | None = None
    accounts: _Names | None = None
    flags: Annotated[list[Annotated[str, Field(max_length=32)]], Field(max_length=32)] | None \
        = None


def _schema() -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": "#/components/schemas/ReservationBody"}}}}}


def _publish(app: FastAPI) -> None:
    """Put ``ReservationBody`` into the OpenAPI document's components."""
    base = app.openapi

    def openapi() -> dict[str, Any]:
        schema: dict[str, Any] = base()
        comps = schema.setdefault("components", {}).setdefault("schemas", {})
        if "ReservationBody" not in comps:
            body = ReservationBody.model_json_schema(ref_template="#/components/schemas/"
                                                     "{model}")
            comps.update(body.pop("$defs", {}))
            comps["ReservationBody"] = body
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def parse_body(body: Any) -> dict[str, Any]:
    from pydantic import ValidationError

    if not isinstance(body, dict):
        raise ApiError("invalid", "a reservation must be a JSON object")
    try:
        ReservationBody.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "request"
        raise ApiError("invalid", f"bad field {where}: {err.get('msg')}") from None
    return body


def mount(app: FastAPI, ctl: Any, identity: Callable[[Any], Identity],
          operator: Callable[[Any], Identity], read_body: Callable[[Any], Any],
          answer: Callable[[Any], Any], prefix: str) -> None:
    table = ctl.reservations
    _publish(app)

    @app.get(prefix + "/reservations", summary="Advance reservations")
    async def list_reservations(request: Request) -> Any:
        identity(request)
        return answer({"reservations": table.api(time.time())})

    @app.post(prefix + "/reservations", summary="Create an advance reservation (operators)",
              openapi_extra=_schema())
    async def create_reservation(request: Request) -> Any:
        who = operator(request)
        r = table.create(parse_body(await read_body(request)), who)
        return answer(table.to_api(r, time.time()))

    @app.patch(prefix + "/reservations/{name}",
               summary="Change an advance reservation (operators)", openapi_extra=_schema())
    async def update_reservation(request: Request, name: str) -> Any:
        who = operator(request)
        r = table.update(name, parse_body(await read_body(request)), who)
        return answer(table.to_api(r, time.time()))

    @app.delete(prefix + "/reservations/{name}",
                summary="Delete an advance reservation (operators)")
    async def delete_reservation(request: Request, name: str) -> Any:
        who = operator(request)
        table.delete(name, who)
        return answer({"deleted": name})
