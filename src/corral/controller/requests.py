"""Typed request bodies of the controller's API (issue 11, item 1).

Every operation that takes a JSON body has a pydantic model here. The models are the
published contract: ``/openapi.json`` carries their schemas (types, ranges, sizes) as each
operation's ``requestBody``, so a client or a fuzzer (schemathesis) can validate against
them. At the edge, ``parse(Model, body)`` checks a decoded body against its model and
turns the first problem into a 400 naming the field (``bad field ids.3: ...``); the
handler then works on the checked body.

Models are strict (no ``"5"`` for an integer, no number for a string), integers are
bounded to 64 bits, lists and strings have caps, and unknown keys are ignored, as they
always were, so older clients keep working.

Submissions are the exception: their model is the ``JobSubmission`` dataclass itself
(its schema comes from pydantic's ``TypeAdapter``), and they are checked by
``corral.wirecheck``, compiled from the same type hints for the hot submit path.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    TypeAdapter,
    ValidationError,
)

from corral.controller.errors import ApiError

Int64 = Annotated[int, Field(ge=-(2 ** 63), le=2 ** 63 - 1)]
Count = Annotated[int, Field(ge=0, le=2 ** 63 - 1)]
Seconds = Annotated[float, Field(ge=0, le=1e15, allow_inf_nan=False)]
Name = Annotated[str, Field(max_length=4096)]
Text = Annotated[str, Field(max_length=1 << 20)]
JobRef = Annotated[str | Int64, Field(description="a job id: 12, \"12\", \"12_3\" or \"12.4\"")]
FormValue = Annotated[str, Field(max_length=4096)] | Int64 | None  # as an sbatch flag's value
# a JSON array [exists, text]: lax only about list-for-tuple, its items stay strict
FileEntry = Annotated[tuple[StrictBool, Annotated[StrictStr, Field(max_length=1 << 24)]],
                      Field(strict=False)]
MAX_IDS = 100_000
MAX_ARGS = 100_000


class Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class JobQuery(Body):
    """``POST /jobs/query``: which active (or finished) jobs, and which fields."""

    ids: Annotated[list[JobRef], Field(max_length=MAX_IDS)] | None = None
    states: Annotated[list[Name], Field(max_length=64)] | None = None
    fields: Annotated[list[Name], Field(max_length=512)] | None = None
    user: Name | None = None
    partition: Name | None = None
    account: Name | None = None
    name: Name | None = None
    include_finished: bool | None = None
    limit: Count | None = Field(None, description="rows per page (at most 100,000)")
    after: Int64 | None = Field(None, description="the previous page's next_after")


class HistoryQuery(Body):
    """``POST /history``: accounting records from the database."""

    ids: Annotated[list[JobRef], Field(max_length=MAX_IDS)] | None = None
    states: Annotated[list[Name], Field(max_length=64)] | None = None
    user: Name | None = None
    all_users: bool | None = None
    since: float | None = Field(None, allow_inf_nan=False)
    until: float | None = Field(None, allow_inf_nan=False)
    account: Name | None = None
    partition: Name | None = None
    names: Annotated[list[Name], Field(max_length=MAX_IDS)] | None = Field(
        None, description="job names (sacct --name): the database's name index")
    limit: Count | None = None
    after: Int64 | None = None


class JobAction(Body):
    """``POST /jobs/cancel|hold|release|requeue``: the jobs and the action's options."""

    ids: Annotated[list[JobRef], Field(max_length=MAX_IDS)]
    signal: Name | Int64 | None = Field(None, description="a signal name or number (cancel)")
    scope: Name | None = Field(None, description="cancel: batch, full (as scancel -b/-f)")
    admin: bool | None = None
    batch_only: bool | None = None
    hold: bool | None = None


class TokenRequest(Body):
    """``POST /tokens``: a token for ``user`` (root only for others) for ``ttl_s``."""

    user: Name | None = None
    ttl_s: Annotated[int, Field(ge=1, le=2 ** 63 - 1)] | None = Field(
        None, description="seconds; at most [controller] max_token_ttl_s")


class NodeReason(Body):
    """``POST /nodes/{name}/drain|down``: the reason shown in sinfo -R."""

    reason: Annotated[str, Field(max_length=1024)] | None = None


class ImagePull(Body):
    """``POST /images/pull``: put an image into the node image caches ahead of its jobs."""

    ref: Annotated[str, Field(min_length=1, max_length=1024)]
    nodes: Annotated[list[Name], Field(max_length=10_000)] | None = Field(
        None, description="nodes to pull on (default: every connected node)")


class JobUpdate(Body):
    """``PATCH /jobs/{id}``: the fields to change (``corral.controller.updates``)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    time_limit_s: Int64 | None = None
    priority: Int64 | None = None
    nice: Int64 | None = None
    name: Name | None = None
    comment: Name | None = None
    account: Name | None = None
    qos: Name | None = None
    constraint: Name | None = None
    requeue: bool | None = None
    partition: Name | Annotated[list[Name], Field(max_length=256)] | None = None
    partitions: Name | Annotated[list[Name], Field(max_length=256)] | None = None
    begin_time: float | None = Field(None, allow_inf_nan=False)
    nodes_min: Int64 | None = None
    nodes_max: Int64 | None = None
    ntasks: Int64 | None = None
    cpus_per_task: Int64 | None = None
    dependency: Name | None = None


class StepLaunchRequest(Body):
    """The ``launch`` of a step that runs through the agents (``corral.protocol.step``)."""

    argv: Annotated[list[Text], Field(max_length=MAX_ARGS)]
    cwd: Name
    env: dict[Name, Text]
    ntasks: Annotated[int, Field(ge=1, le=1 << 20)]
    nodes: Annotated[list[Name], Field(max_length=65536)]
    tasks: Annotated[list[list[Count]], Field(max_length=65536)]
    io_addr: Name
    io_key: Name
    cpus_per_task: Annotated[int, Field(ge=1, le=1 << 20)] = 1
    cpu_bind: Name = ""
    distribution: Name = "block"
    output: Name | None = None
    error: Name | None = None
    input: Name | None = None
    append: bool = True
    kill_on_bad_exit: bool = False
    pty: bool = False
    job_name: Name = ""
    gpus_per_task: Count = 0
    gpu_bind: Name = ""
    extra_env: dict[Name, Text] = {}
    task_env: dict[Name, dict[Name, Text]] = {}
    container: Annotated[str, Field(max_length=65536)] = ""  # ContainerSpec text


class StepStart(Body):
    """``POST /jobs/{id}/steps``: a step ``srun`` starts (``launch``: run it on the nodes)."""

    argv: Annotated[list[Text], Field(max_length=MAX_ARGS)] | None = None
    nodes: Annotated[list[Name], Field(max_length=65536)] | None = None
    name: Name | None = None
    ntasks: Annotated[int, Field(ge=1, le=2 ** 63 - 1)] | None = None
    num_cpus: Count | None = None
    pid: Annotated[int, Field(ge=1, le=2 ** 63 - 1)] | None = None
    start_time: Seconds | None = None
    launch: StepLaunchRequest | None = None


class NodeUsage(Body):
    node: Name | None = None
    cpu_time_s: Seconds | None = None
    max_rss_mb: Seconds | None = None
    pids: Annotated[list[Count], Field(max_length=1 << 20)] | None = None  # task pids


class StepUsage(Body):
    nodes: dict[Name, NodeUsage] | None = None
    cpu_time_s: Seconds | None = None
    max_rss_mb: Seconds | None = None


class StepEnd(Body):
    """``POST /jobs/{id}/steps/{n}/end``: how a step ended, and what it used."""

    state: Name | None = None
    exit_code: Count | None = None
    signal: Count | None = None
    end_time: Seconds | None = None
    usage: StepUsage | None = None


class AllocationRelease(Body):
    """``POST /jobs/{id}/allocation/release``: the allocation's command's exit code."""

    exit_code: Int64 | None = None


ShimCommand = Literal["sbatch", "squeue", "scancel", "sacct", "sinfo", "scontrol", "sacctmgr",
                      "sshare", "sprio", "sreport", "sstat",
                      "qsub", "qstat", "qdel", "srun"]


class StepIo(Body):
    """Where the compiled ``srun`` listens for its step's nodes (``corral.shims.srun_fast``)."""

    addr: Annotated[str, Field(max_length=64, description="IPv4 host:port")]
    key: Annotated[str, Field(max_length=64, description="the step's key: 32 hex digits")]
    pid: Annotated[int, Field(ge=1, lt=1 << 31)] | None = None


class ShimExec(Body):
    """``POST /shim/exec``: one shim command run in the controller (``corral.shims.lean``)."""

    cmd: ShimCommand
    argv: Annotated[list[Text], Field(max_length=MAX_ARGS)]
    env: dict[Name, Text] | None = None
    cwd: Name | None = None
    files: dict[Name, FileEntry] | None = Field(
        None, description="path -> [exists, contents] of files the command reads")
    stdin: Text | None = None
    step_io: StepIo | None = Field(None, description="srun only: its I/O listener")


class WebSubmit(Body):
    """``POST /ops/submit``: the web portal's form (``corral.web.submit``)."""

    script: Text = Field(description="the batch script (#SBATCH lines are read)")
    workdir: Name | None = Field(None, description="absolute; default: the caller's home")
    name: FormValue = None
    partition: FormValue = None
    cpus: FormValue = None
    ntasks: FormValue = None
    nodes: FormValue = None
    mem: FormValue = None
    time: FormValue = None
    gpus: FormValue = None
    account: FormValue = None
    qos: FormValue = None
    array: FormValue = None
    output: FormValue = None
    error: FormValue = None


MODELS: tuple[type[Body], ...] = (
    JobQuery, HistoryQuery, JobAction, TokenRequest, NodeReason, JobUpdate, StepStart,
    StepEnd, AllocationRelease, ShimExec, WebSubmit, ImagePull,
)


def parse(model: type[Body], body: Any, what: str = "the request") -> dict[str, Any]:
    """``body`` checked against ``model``; a 400 naming the first bad field otherwise.
    Returns the body itself (only the keys that were sent)."""
    if not isinstance(body, dict):
        raise ApiError("invalid", f"{what} must be a JSON object")
    try:
        model.model_validate(body)
    except ValidationError as exc:
        raise ApiError("invalid", describe(exc)) from None
    return body


def describe(exc: ValidationError) -> str:
    """The first error of ``exc`` as ``bad field a.b: message``."""
    err = exc.errors(include_url=False)[0]
    field = ".".join(str(p) for p in err.get("loc", ())) or "body"
    msg = str(err.get("msg", "invalid"))
    if err.get("type") == "missing":
        msg = "required field missing"
    return f"bad field {field}: {msg}"


@cache
def _submission_schemas() -> dict[str, Any]:
    from corral.submission import JobSubmission

    schema = TypeAdapter(JobSubmission).json_schema(
        ref_template="#/components/schemas/{model}")
    defs = schema.pop("$defs", {})
    schema["title"] = "JobSubmission"
    return {**defs, "JobSubmission": schema}


def component_schemas() -> dict[str, Any]:
    """Every request model's JSON schema, keyed as in ``#/components/schemas``."""
    out: dict[str, Any] = dict(_submission_schemas())
    for model in MODELS:
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        out.update(schema.pop("$defs", {}))
        out[model.__name__] = schema
    copied: dict[str, Any] = json.loads(json.dumps(out))  # callers may change theirs
    return copied


def body_of(name: str, required: bool = True) -> dict[str, Any]:
    """``openapi_extra`` for a route whose JSON body is the component ``name``."""
    return {"requestBody": {"required": required, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{name}"}}}}}


def publish(app: Any) -> None:
    """Put every request model into ``app``'s OpenAPI document (``/openapi.json``), and
    answer FastAPI's own parameter errors (a query ``limit=x``) in the API's error shape,
    as a 400 naming the parameter."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    base = app.openapi

    def openapi() -> dict[str, Any]:
        schema: dict[str, Any] = base()
        comps = schema.setdefault("components", {}).setdefault("schemas", {})
        if "JobSubmission" not in comps:
            comps.update(component_schemas())
        return schema

    app.openapi = openapi

    async def bad_parameter(_request: Any, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        err = errs[0] if errs else {}
        loc = [str(p) for p in err.get("loc", ())]
        field = ".".join(loc[1:] if len(loc) > 1 else loc) or "request"
        api = ApiError("invalid", f"bad parameter {field}: {err.get('msg', 'invalid')}")
        return JSONResponse(api.to_json(), status_code=api.status)

    app.add_exception_handler(RequestValidationError, bad_parameter)
