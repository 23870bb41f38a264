"""The agent's image pull children (corral.agent.pulls): real pulls from a registry on
loopback in child processes, their progress notes and ends read without blocking, one
child per reference, an early pull that leaves a cached image alone, a failure with the
registry's reason, the cap on children."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.agent import pulls as pulls_mod
from corral.agent.images import ImageCache
from corral.agent.pulls import Pulls
from corral.agent.runtimes import ContainerSettings
from tests.registry import Registry, require_containers, running_registry


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    require_containers()
    with running_registry() as reg:
        reg.push_busybox("p/one:1", os_name="one", filler_kb=2048)
        yield reg


def settings(root: Path, reg: Registry) -> ContainerSettings:
    return ContainerSettings(skopeo="skopeo", cache_dir=str(root), insecure=(reg.host,),
                             pull_timeout_s=60.0)


def until_ended(p: Pulls, timeout: float = 60.0) -> list[dict[str, Any]]:
    """Every state change until no pull is left (polled, as the agent's sweeper does)."""
    seen: list[dict[str, Any]] = []
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        seen += p.poll()
        if not len(p):
            return seen
        time.sleep(0.02)
    raise AssertionError(f"pulls still running after {timeout} s: {seen}")


def test_early_pull_reports_progress_then_done(tmp_path: Path, registry: Registry) -> None:
    p = Pulls(settings(tmp_path, registry))
    ref = registry.ref("p/one:1")
    assert p.start(ref, early=True) == ""
    assert p.start(ref) == "" and len(p) == 1  # joined, not a second child
    seen = until_ended(p)
    notes = [s["note"] for s in seen if s["state"] == "pulling"]
    assert f"pulling {ref}" in notes and f"unpacking {ref}" in notes, seen
    [end] = [s for s in seen if s["state"] != "pulling"]
    assert end["state"] == "done" and end["digest"].startswith("sha256:"), end
    assert end["early"] is True
    hit = ImageCache(str(tmp_path)).lookup(ref)
    assert hit is not None and hit.digest == end["digest"]
    # a second early pull of a cached reference asks no registry: no "pulling" note
    p.start(ref, early=True)
    again = until_ended(p)
    assert [s["state"] for s in again] == ["done"], again


def test_failed_pull_says_why(tmp_path: Path, registry: Registry) -> None:
    p = Pulls(settings(tmp_path, registry))
    ref = registry.ref("p/missing:0")
    p.start(ref, early=True)
    [end] = [s for s in until_ended(p) if s["state"] != "pulling"]
    assert end["state"] == "failed" and end["error"].startswith(f"cannot pull {ref}: "), end
    assert "corral image pull:" not in end["error"]


def test_children_are_capped(tmp_path: Path, registry: Registry,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pulls_mod, "MAX_PULLS", 1)
    p = Pulls(settings(tmp_path, registry))
    assert p.start(registry.ref("p/one:1"), early=True) == ""
    why = p.start(registry.ref("p/other:1"), early=True)
    assert why == "1 pulls already running on this node"
    seen = until_ended(p)
    refused = [s for s in seen if s["ref"] == registry.ref("p/other:1")]
    assert refused == [{"ref": registry.ref("p/other:1"), "state": "failed", "note": "",
                        "digest": "", "error": why, "early": True}], seen
