"""Submission intake: from the API payload to validated job records (arrays expanded).

Checks, in order, each failing with a precise ``ApiError``: the payload decodes to a
``JobSubmission``; the caller's identity replaces the claimed one (only root may submit
as someone else, like ``sbatch --uid``); partitions and QOS exist; the array spec parses
within ``max_array_size``; the working directory is absolute; the request can ever run
(``corral.core.feasibility.validate``: "can never run" is a rejection at submit, "cannot
run now" is a pending reason). Dependencies on job ids that never existed are dropped,
as Slurm does. Array tasks are separate jobs with consecutive ids; the first task's id is
the array's id (``A_a`` display ids), so every task keeps Slurm's ``SLURM_ARRAY_*``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from corral.config.schema import ClusterConfig
from corral.controller.auth import Identity
from corral.controller.errors import ApiError
from corral.controller.records import JobRecord
from corral.controller.runtimes import check_runtime
from corral.core.model.job import DependencySpec, HoldKind, JobSpec
from corral.core.parse.errors import ParseError
from corral.submission import JobSubmission
from corral.wirecheck import FieldError, check


def decode_submission(body: Any) -> JobSubmission:
    if not isinstance(body, dict) or not isinstance(body.get("spec"), dict):
        raise ApiError("invalid", "a submission is a JSON object with a 'spec' object")
    try:
        check(JobSubmission, body)
    except FieldError as exc:
        raise ApiError("invalid", f"bad submission field {exc.field}: {exc.message}") from None
    try:
        return JobSubmission.from_json(body)
    except TypeError as exc:
        raise ApiError("invalid", f"bad submission: {exc}") from None
    except (KeyError, ValueError) as exc:
        raise ApiError("invalid", f"bad submission field: {exc}") from None


def apply_identity(sub: JobSubmission, who: Identity, cfg: ClusterConfig,
                   single_uid: int | None = None) -> JobSubmission:
    """The submission with the caller's identity (root may name another user).

    ``single_uid``: the uid of a controller that does not run as root (``corral up`` by an
    ordinary user): its agents can only run jobs as that user, so a job for anyone else
    is refused here, at submit, instead of failing at launch."""
    spec = sub.spec
    if who.uid == 0 and who.via == "socket" and spec.user and spec.user != "root":
        # root may submit on behalf of a user (sbatch --uid): trust the given identity
        import pwd

        try:
            pw = pwd.getpwnam(spec.user)
        except KeyError:
            raise ApiError("invalid", f"unknown user {spec.user!r}") from None
        user, uid, gid = spec.user, pw.pw_uid, spec.gid if spec.gid else pw.pw_gid
    else:
        user, uid, gid = who.user, who.uid, who.gid
    if single_uid is not None and uid != single_uid:
        from corral.controller.auth import user_name

        owner = user_name(single_uid)
        raise ApiError("forbidden", f"this cluster runs as user {owner} (uid {single_uid}), "
                       f"not as root, so it runs jobs only as {owner}, not as {user} "
                       f"(uid {uid}); submit as {owner}, or start the cluster as root to "
                       "run jobs as their submitting users",
                       slurm="Access/permission denied")
    account = spec.account or cfg.default_account(user)
    changes: dict[str, Any] = {"user": user, "uid": uid, "gid": gid, "account": account}
    if spec.qos is None and cfg.qos:
        changes["qos"] = None  # the core applies the partition/association default
    out: JobSubmission = _replace(sub, spec=_replace(spec, **changes))
    return out


_NAMES: dict[type, tuple[str, ...]] = {}


def _replace(obj: Any, **changes: Any) -> Any:
    """``dataclasses.replace`` for the frozen submission types, without the generic
    machinery (several times faster; every submit calls it twice). Classes with a
    ``__post_init__`` or changes naming no field go through ``dataclasses.replace``."""
    cls = type(obj)
    names = _NAMES.get(cls)
    if names is None:
        if hasattr(cls, "__post_init__") or any(
                not f.init for f in dataclasses.fields(obj)):
            return dataclasses.replace(obj, **changes)
        names = _NAMES[cls] = tuple(f.name for f in dataclasses.fields(obj))
    if not changes.keys() <= set(names):
        return dataclasses.replace(obj, **changes)  # raises the precise TypeError
    new = object.__new__(cls)
    setter = object.__setattr__
    for name in names:
        setter(new, name, changes[name] if name in changes else getattr(obj, name))
    return new


def check_names(sub: JobSubmission, cfg: ClusterConfig) -> None:
    part_names = {p.name for p in cfg.partitions}
    for p in sub.spec.partitions:
        if p not in part_names:
            raise ApiError("invalid", f"invalid partition specified: {p}",
                           slurm="Invalid partition name specified")
    if sub.spec.qos is not None and sub.spec.qos not in {q.name for q in cfg.qos}:
        raise ApiError("invalid", f"invalid qos specified: {sub.spec.qos}",
                       slurm="Invalid qos specification")
    # --reservation is checked against the reservations (ReservationTable.check_submit)
    if not sub.workdir.startswith("/"):
        raise ApiError("invalid", f"the working directory must be an absolute path, "
                                  f"not {sub.workdir!r}")
    if sub.script is None and not sub.argv and not sub.interactive:
        raise ApiError("invalid", "a job needs a batch script or a command (argv)")
    if sub.spec.nodes_min < 1 or (sub.spec.nodes_max is not None
                                  and sub.spec.nodes_max < sub.spec.nodes_min):
        raise ApiError("invalid", "bad node count: need 1 <= nodes_min <= nodes_max")
    if sub.spec.cpus_per_task < 1:
        raise ApiError("invalid", "cpus_per_task must be at least 1")
    if sub.spec.ntasks is not None and sub.spec.ntasks < 1:
        raise ApiError("invalid", "ntasks must be at least 1")
    if sub.spec.time_limit_s is not None and sub.spec.time_limit_s < 0:
        raise ApiError("invalid", "time_limit_s must not be negative")
    check_container(sub, cfg)
    check_runtime(sub, cfg)


def check_container(sub: JobSubmission, cfg: ClusterConfig) -> None:
    """A container job's spec is well formed (it may come straight from the API) and
    allowed here: containers enabled, the registry allowed, remap-root allowed."""
    from corral.containers.spec import ContainerError
    from corral.frontends.container_options import spec_of

    try:
        spec = spec_of(sub.extra)
    except ContainerError as exc:
        raise ApiError("invalid", f"bad container: {exc}", slurm=str(exc)) from None
    if spec is not None:
        check_container_spec(spec, cfg)


def check_container_spec(spec: Any, cfg: ClusterConfig) -> None:
    """``[containers]`` policy for one ``ContainerSpec`` (a job's or an srun step's)."""
    cc = cfg.containers
    if not cc.enabled:
        msg = "container jobs are disabled on this cluster ([containers] enabled = false)"
        raise ApiError("invalid", msg, slurm=msg)
    ref = spec.image
    if ref.kind == "docker" and cc.allowed_registries \
            and ref.registry not in cc.allowed_registries:
        msg = (f"image registry {ref.registry} is not allowed here (allowed: "
               f"{', '.join(cc.allowed_registries)})")
        raise ApiError("invalid", msg, slurm=msg)
    if spec.remap_root and not cc.allow_remap_root:
        msg = ("--container-remap-root is not allowed on this cluster "
               "([containers] allow_remap_root = false)")
        raise ApiError("invalid", msg, slurm=msg)


def filter_dependency(spec: JobSpec, exists: Callable[[int], bool]) -> JobSpec:
    """Drop dependency items whose jobs never existed (Slurm: ``Dependency=(null)``)."""
    dep = spec.dependency
    if dep is None:
        return spec
    items = []
    for item in dep.items:
        ids = tuple(i for i in item.job_ids if exists(i))
        if item.job_ids and not ids:
            continue
        items.append(dataclasses.replace(item, job_ids=ids))
    new = DependencySpec(items=tuple(items), any_of=dep.any_of) if items else None
    return dataclasses.replace(spec, dependency=new)


def array_indices(sub: JobSubmission, cfg: ClusterConfig) -> tuple[tuple[int, ...], int | None]:
    if not sub.array:
        return (), None
    from corral.core.parse.arrayspec import parse_array

    try:
        arr = parse_array(sub.array, max_array_size=cfg.scheduler.max_array_size)
    except ParseError as exc:
        raise ApiError("invalid", str(exc), slurm="Invalid job array specification") from None
    return arr.indices, arr.max_running


def build_records(sub: JobSubmission, first_id: int, now: float, submit_host: str,
                  indices: tuple[int, ...], max_running: int | None,
                  limit: int | None = None) -> list[JobRecord]:
    """The job records of a submission: one, or one per array task (the first ``limit``
    tasks only, when given: the rest stays compact, ``corral.controller.arraytail``)."""
    hold = HoldKind.USER if sub.hold else HoldKind.NONE
    if not indices:
        return [JobRecord(id=first_id, sub=sub, submit_time=now, hold=hold,
                          submit_host=submit_host, time_limit_s=sub.spec.time_limit_s)]
    out = []
    for k, idx in enumerate(indices if limit is None else indices[:limit]):
        out.append(JobRecord(
            id=first_id + k, sub=sub, submit_time=now, hold=hold, submit_host=submit_host,
            time_limit_s=sub.spec.time_limit_s,
            array_job_id=first_id, array_task_id=idx, array_max_running=max_running,
            array_task_count=len(indices), array_task_min=indices[0],
            array_task_max=indices[-1],
        ))
    return out
