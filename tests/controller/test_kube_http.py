"""Selectors, merge patch, Tables and Status errors of the Kubernetes API subset."""

from __future__ import annotations

import pytest

from corral.controller.kube_http import (
    KubeError,
    field_selector,
    invalid,
    label_selector,
    merge_patch,
    table,
)
from corral.controller.kube_objects import Versions
from corral.controller.kube_time import age


def test_field_selectors() -> None:
    obj = {"metadata": {"name": "a", "namespace": "ns"}, "status": {"phase": "Running"}}
    assert field_selector("metadata.name=a,status.phase==Running")(obj)
    assert not field_selector("metadata.name!=a")(obj)
    assert field_selector("spec.nodeName=")(obj)  # a missing field is the empty string
    assert field_selector(None)(obj)
    with pytest.raises(KubeError):
        field_selector("metadata.name")


def test_label_selectors() -> None:
    labels = {"app": "cfd", "tier": "gpu"}
    for text, want in [("app=cfd", True), ("app!=cfd", False), ("app in (cfd, ai)", True),
                       ("tier notin (gpu)", False), ("app,!missing", True), ("!app", False),
                       ("app=cfd,tier in (cpu,gpu)", True), ("", True)]:
        assert label_selector(text)(labels) is want, text
    with pytest.raises(KubeError):
        label_selector("a b c")


def test_merge_patch_is_rfc_7386() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}, "d": [1]}, {"a": {"b": None, "e": 3},
                                                           "d": [2]}) == \
        {"a": {"c": 2, "e": 3}, "d": [2]}
    assert merge_patch({"a": 1}, "x") == "x"


def test_table_and_status() -> None:
    objs = [{"metadata": {"name": "x"}, "n": 1}]
    t = table([("NAME", "string", 0, lambda o: o["metadata"]["name"])], objs, "7", None)
    assert t["kind"] == "Table" and t["rows"][0]["cells"] == ["x"]
    assert t["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert table([], objs, "7", "Object")["rows"][0]["object"] is objs[0]
    err = invalid("Job", "batch.volcano.sh", "j", [("spec.x", "FieldValueForbidden", "no")])
    st = err.status()
    assert (st["code"], st["reason"]) == (422, "Invalid")
    assert st["details"]["causes"] == [{"reason": "FieldValueForbidden", "message": "no",
                                        "field": "spec.x"}]


def test_ages_read_like_kubectl() -> None:
    assert [age(100.0 - s, 100.0) for s in (5, 119, 150, 7300, 3 * 86400)] == [
        "5s", "119s", "2m", "2h", "3d"]


def test_versions_grow_when_a_record_changes() -> None:
    class Rec:  # the fields Versions reads
        id = 1
        state = "RUNNING"
        start_time = end_time = exit_code = None
        reason = reason_detail = ""
        restarts = 0
        steps: list[object] = []

        class sub:  # noqa: N801
            extra: dict[str, str] = {}

    v = Versions()
    rec = Rec()
    first = v.of(rec)  # type: ignore[arg-type]
    assert v.of(rec) == first  # type: ignore[arg-type]
    listed = v.current()
    rec.state = "COMPLETED"
    assert v.of(rec) > listed >= first  # type: ignore[arg-type]


def test_nodes_show_gpus_gres_and_features_as_kubernetes_sees_them() -> None:
    from builders import node_spec

    from corral.controller.kube_objects import node
    from corral.controller.records import NodeRecord
    from corral.core.model.node import NodeState

    spec = node_spec("gpu1", 2, 8, 64000, gpus=4, gpu_type="h200",
                     features=("avx512", "rack=r1"), gres=(("fpga", 2),))
    rec = NodeRecord(spec=spec, state=NodeState.MIXED, alloc_cpus=4, alloc_mem_mb=1000,
                     alloc_gpus=1, partitions=("gpu",))
    out = node(rec, 0.0)
    st = out["status"]
    assert st["capacity"] == {"cpu": "16", "memory": "64000Mi", "pods": "110",
                              "nvidia.com/gpu": "4", "corral.dev/fpga": "2"}
    assert st["allocatable"]["cpu"] == "12" and st["allocatable"]["nvidia.com/gpu"] == "3"
    labels = out["metadata"]["labels"]
    assert labels["feature.node.kubernetes.io/avx512"] == "true" and labels["avx512"] == "true"
    assert labels["rack"] == "r1" and labels["nvidia.com/gpu.product"] == "h200"
    assert labels["corral.dev/partition-gpu"] == "true"
    assert st["conditions"][0]["status"] == "True"


def test_volcano_host_commands_is_a_controller_setting() -> None:
    from corral.config.load import parse_config
    from corral.controller.kube import host_commands

    class Ctl:
        def __init__(self, data: dict[str, object]) -> None:
            self.cfg = parse_config(data)

    assert host_commands(Ctl({})) is True  # type: ignore[arg-type]
    off = Ctl({"controller": {"volcano_host_commands": False}})
    assert host_commands(off) is False  # type: ignore[arg-type]
    assert Ctl({}).cfg.controller.volcano_images == "container"
    assert Ctl({"controller": {"volcano_images": "host"}}).cfg.controller.volcano_images \
        == "host"
    from corral.config.load import ConfigError

    with pytest.raises(ConfigError, match='must be "container" or "host"'):
        Ctl({"controller": {"volcano_images": "docker"}})
    assert Ctl({}).cfg.controller.volcano_python == ""  # the controller's interpreter
    assert Ctl({"controller": {"volcano_python": "/usr/bin/python3"}}).cfg.controller \
        .volcano_python == "/usr/bin/python3"
    with pytest.raises(ConfigError, match="controller.volcano_python.*absolute path"):
        Ctl({"controller": {"volcano_python": "python3"}})
