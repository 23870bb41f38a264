"""The controller's checks of a container job at submit ([containers] policy)."""

from __future__ import annotations

import pytest

from corral.config.load import parse_config
from corral.containers.spec import ContainerSpec, parse_image
from corral.controller.errors import ApiError
from corral.controller.intake import check_container
from corral.core.model.job import JobSpec
from corral.submission import JobSubmission


def sub(text: str) -> JobSubmission:
    return JobSubmission(spec=JobSpec(name="j", user="alice"), script="#!/bin/sh\n",
                         workdir="/tmp", extra={"container": text})


def spec(image: str, **kw: object) -> str:
    return ContainerSpec(parse_image(image), **kw).to_text()  # type: ignore[arg-type]


def test_allowed_jobs_pass() -> None:
    cfg = parse_config({"containers": {"allowed_registries": ["127.0.0.1:5000"],
                                       "allow_remap_root": True}})
    check_container(sub(spec("127.0.0.1:5000/a:1", remap_root=True)), cfg)
    check_container(sub(spec("/srv/rootfs")), cfg)  # paths are not registry images
    check_container(JobSubmission(spec=JobSpec(), workdir="/"), cfg)  # no container at all


@pytest.mark.parametrize(("settings", "text", "why"), [
    ({"allowed_registries": ["127.0.0.1:5000"]}, spec("docker.io/library/x"),
     "image registry docker.io is not allowed here (allowed: 127.0.0.1:5000)"),
    ({}, spec("busybox", remap_root=True),
     "--container-remap-root is not allowed on this cluster"),
    ({"enabled": False}, spec("busybox"), "container jobs are disabled"),
    ({}, '{"image": "UPPER"}', "invalid image reference 'UPPER'"),
    ({}, "not json", "unreadable container specification"),
])
def test_refusals_carry_the_reason_for_every_dialect(settings: dict[str, object], text: str,
                                                     why: str) -> None:
    cfg = parse_config({"containers": settings})
    with pytest.raises(ApiError) as exc:
        check_container(sub(text), cfg)
    assert why in exc.value.message and why in (exc.value.slurm or "")
