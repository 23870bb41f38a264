"""The controller's side of runtime classes (``corral.core.runtime``): what a job runs in,
and whether a submission's runtime request is allowed on this cluster.

``job_runtime``: the job's own class, or its partition's (the partition it runs in, else
the first it was submitted to, else the default partition). ``check_runtime`` refuses at
submit time what can never run: an unknown class, a VM job where ``[vm] enabled`` is
false, a bad image name, an image path where ``[vm] allow_user_images`` is false, or a
class that contradicts every partition the job names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from corral.config.schema import ClusterConfig
from corral.controller.errors import ApiError
from corral.controller.records import JobRecord
from corral.core.model.partition import Partition
from corral.core.runtime import RUNTIMES, VM, RuntimeConflict, effective_runtime
from corral.submission import JobSubmission


def _partition_runtime(names: Iterable[str | None], partitions: Iterable[Partition]) -> str | None:
    parts = list(partitions)
    by_name = {p.name: p for p in parts}
    for name in names:
        if name and name in by_name:
            return by_name[name].runtime
    default = next((p for p in parts if p.is_default), None)
    return default.runtime if default is not None else None


def job_runtime(rec: JobRecord, partitions: Iterable[Partition]) -> str:
    spec = rec.sub.spec
    names = [rec.partition, *(spec.partitions[:1])]
    try:
        return effective_runtime(spec.runtime, _partition_runtime(names, partitions))
    except RuntimeConflict:
        return spec.runtime


def normalize_runtime(sub: JobSubmission, cfg: ClusterConfig) -> JobSubmission:
    """A default-class job whose partitions all impose one class gets it in its spec, so
    every view of the pending job (queue, show, history) shows where it will run."""
    spec = sub.spec
    if spec.runtime != "host" or "container" in sub.extra:
        return sub
    forced = {p.name: p.runtime for p in cfg.partitions}
    names = list(spec.partitions) or [p.name for p in cfg.partitions if p.default][:1]
    classes = {forced.get(n) for n in names}
    if len(classes) == 1 and (only := classes.pop()) not in (None, "host"):
        return dataclasses.replace(sub, spec=dataclasses.replace(spec, runtime=str(only)))
    return sub


def check_runtime(sub: JobSubmission, cfg: ClusterConfig) -> None:
    from corral.vmimage.manifest import ImageError, check_name

    spec = sub.spec
    if spec.runtime not in RUNTIMES:
        msg = f"unknown runtime class {spec.runtime!r} (one of {', '.join(RUNTIMES)})"
        raise ApiError("invalid", msg, slurm=msg)
    forced = {p.name: p.runtime for p in cfg.partitions}
    names = list(spec.partitions) or [p.name for p in cfg.partitions if p.default][:1]
    runtime = spec.runtime
    if names and all(n in forced for n in names):
        runtimes = set()
        for n in names:
            try:
                runtimes.add(effective_runtime(spec.runtime, forced[n]))
            except RuntimeConflict as exc:
                if len(names) == 1:
                    raise ApiError("invalid", str(exc), slurm=str(exc)) from None
        if len(runtimes) == 1:
            runtime = runtimes.pop()
    if runtime != VM and "vm_image" not in sub.extra:
        return
    if runtime != VM:
        msg = f"a VM image is given but the job's runtime class is {runtime}"
        raise ApiError("invalid", msg, slurm=msg)
    if "container" in sub.extra:
        msg = "a job runs in a VM or in a container, not both"
        raise ApiError("invalid", msg, slurm=msg)
    if not cfg.vm.enabled:
        msg = "VM jobs are disabled on this cluster ([vm] enabled = false)"
        raise ApiError("invalid", msg, slurm=msg)
    image = sub.extra.get("vm_image", "")
    try:
        value = check_name(image)
    except ImageError as exc:
        raise ApiError("invalid", f"bad VM image: {exc}", slurm=str(exc)) from None
    if value.startswith("/") and not cfg.vm.allow_user_images:
        msg = ("this cluster boots only the images of its nodes' cache "
               "([vm] allow_user_images = false)")
        raise ApiError("invalid", msg, slurm=msg)
    if spec.task_groups or spec.max_nodes != 1:
        msg = "a VM job runs on one node"
        raise ApiError("invalid", msg, slurm=msg)
