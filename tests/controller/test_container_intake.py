"""The controller's checks of a container job at submit ([containers] policy)."""

from __future__ import annotations

from pathlib import Path

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


def test_pending_container_jobs_prefer_the_nodes_holding_their_image() -> None:
    from types import SimpleNamespace

    from corral.controller.images import refresh_preferences
    from corral.controller.records import JobRecord

    ref = "docker://127.0.0.1:5000/a:1"
    nodes = {"n1": SimpleNamespace(images=[{"refs": [ref]}]),
             "n2": SimpleNamespace(images=[{"refs": ["docker://x/y:2"]}]),
             "n3": SimpleNamespace(images=[{"refs": [ref]}])}
    rec = JobRecord(id=1, sub=sub(spec("127.0.0.1:5000/a:1")), submit_time=0.0)
    plain = JobRecord(id=2, sub=JobSubmission(spec=JobSpec(), workdir="/"), submit_time=0.0)
    assert refresh_preferences([rec, plain], nodes) == 1
    assert rec.prefer == ("n1", "n3") and plain.prefer == ()
    assert rec.to_core().spec.prefer_nodes == ("n1", "n3")
    assert rec.sub.spec.prefer_nodes == ()  # the stored submission is unchanged
    assert refresh_preferences([rec], nodes) == 0  # nothing new: no change, no touch
    # a SIF's sandbox is reported under the file's path (Apptainer, corral.agent.apptainer)
    nodes["n2"] = SimpleNamespace(images=[{"refs": ["/srv/img/app.sif"]}])
    sif = JobRecord(id=3, sub=sub(spec("/srv/img/app.sif")), submit_time=0.0)
    directory = JobRecord(id=4, sub=sub(spec("/srv/rootfs")), submit_time=0.0)
    assert refresh_preferences([sif, directory], nodes) == 1
    assert sif.prefer == ("n2",) and directory.prefer == ()


def test_image_pull_request_is_checked() -> None:
    from corral.controller.auth import Identity
    from corral.controller.images import pull_images

    sent: list[dict[str, object]] = []

    class Conn:
        def send(self, msg: dict[str, object]) -> None:
            sent.append(msg)

    cfg = parse_config({"containers": {"allowed_registries": ["r.io"]}})
    who = Identity(user="alice", uid=1000, gid=1000)
    out = pull_images({"n1": Conn()}, {"n1", "n2"}, cfg, who, "r.io/a", ["n1", "n2"])
    assert out == {"ref": "docker://r.io/a:latest", "nodes": ["n1"], "not_connected": ["n2"]}
    assert sent == [{"t": "image_pull", "ref": "docker://r.io/a:latest"}]
    # a SIF: the nodes get the asking user's ids to open it with
    pull_images({"n1": Conn()}, {"n1"}, cfg, who, "/srv/img/app.sif", None)
    assert sent[-1] == {"t": "image_pull", "ref": "/srv/img/app.sif", "uid": 1000,
                        "gid": 1000}
    for ref, nodes, why in (("other.io/a", None, "not allowed"), ("/srv/dir", None,
                            "not a registry image or a SIF"), ("r.io/a", ["n9"], "unknown node"),
                            ("Bad", None, "invalid image reference")):
        with pytest.raises(ApiError) as exc:
            pull_images({"n1": Conn()}, {"n1"}, cfg, who, ref, nodes)
        assert why in exc.value.message


def test_only_pending_image_jobs_are_revisited_when_a_cache_changes(tmp_path: Path) -> None:
    """The controller keeps its pending container jobs apart (``pending_images``), so a
    node's cache report revisits those, not every pending job (an agent's hello after a
    controller restart did that for each of 1,000 nodes over 100,000 pending jobs)."""
    from corral.controller.records import JobRecord
    from corral.controller.service import Controller
    from corral.controller.store import Store
    from corral.core.model.job import JobState

    store = Store(f"sqlite:///{tmp_path / 'c.db'}")
    ctl = Controller(parse_config({}), tmp_path, store)
    img = JobRecord(id=1, sub=sub(spec("127.0.0.1:5000/a:1")), submit_time=0.0)
    plain = JobRecord(id=2, sub=JobSubmission(spec=JobSpec(), workdir="/"), submit_time=0.0)
    bundle = JobRecord(id=3, sub=sub(spec("/srv/rootfs")), submit_time=0.0)
    for rec in (img, plain, bundle):
        ctl._place(rec)
    assert set(ctl.pending) == {1, 2, 3} and list(ctl.pending_images) == [1]
    img.state = JobState.RUNNING
    ctl._place(img)
    assert ctl.pending_images == {} and set(ctl.running) == {1}
    img.state = JobState.PENDING  # requeued
    ctl._place(img)
    assert list(ctl.pending_images) == [1]
