"""Runtime classes at submit: what the controller refuses and what it records."""

from __future__ import annotations

import dataclasses

import pytest

from corral.config.schema import ClusterConfig, PartitionConfig
from corral.controller.errors import ApiError
from corral.controller.runtimes import check_runtime, normalize_runtime
from corral.core.model.job import JobSpec
from corral.submission import JobSubmission
from corral.vmimage.settings import VmConfig

CFG = ClusterConfig(partitions=(PartitionConfig("main", default=True),
                                PartitionConfig("vms", runtime="vm")))


def sub(runtime: str = "host", partitions: tuple[str, ...] = (), **extra: str) -> JobSubmission:
    return JobSubmission(spec=JobSpec(runtime=runtime, partitions=partitions), argv=("true",),
                         extra=dict(extra))


def test_a_vm_partition_gives_its_class_to_default_jobs() -> None:
    assert normalize_runtime(sub(partitions=("vms",)), CFG).spec.runtime == "vm"
    assert normalize_runtime(sub(), CFG).spec.runtime == "host"  # main: the job's own
    assert normalize_runtime(sub(partitions=("main", "vms")), CFG).spec.runtime == "host"
    ctr = sub(partitions=("vms",), container="{}")
    assert normalize_runtime(ctr, CFG) is ctr


def test_submit_refusals() -> None:
    check_runtime(sub("vm", vm_image=""), CFG)
    check_runtime(sub(partitions=("vms",)), CFG)
    cases = [
        (sub("lxc"), "unknown runtime"),
        (sub("container", partitions=("vms",)), "partition runs vm"),
        (sub(vm_image="x"), "runtime class is host"),
        (sub("vm", vm_image="a/b"), "bad VM image"),
        (sub("vm", vm_image="/data/d.qcow2"), "allow_user_images"),
        (sub("vm", vm_image="", container="{}"), "not both"),
        (JobSubmission(spec=JobSpec(runtime="vm", nodes_min=2), argv=("true",),
                       extra={"vm_image": ""}), "one node"),
    ]
    for bad, words in cases:
        with pytest.raises(ApiError, match=words):
            check_runtime(bad, CFG)
    off = dataclasses.replace(CFG, vm=VmConfig(enabled=False))
    with pytest.raises(ApiError, match="disabled"):
        check_runtime(sub("vm", vm_image=""), off)
    ok = dataclasses.replace(CFG, vm=VmConfig(allow_user_images=True))
    check_runtime(sub("vm", vm_image="/data/d.qcow2"), ok)
