"""ResumeRate / SuspendRate (``[power] resume_rate`` / ``suspend_rate``): the power manager
with a clock of the test's own, real resume and suspend programs (scripts that record
their host list), and the controller's node records behind a minimal controller."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from corral.config.load import ConfigError, parse_config
from corral.config.power import PowerConfig, check_power
from corral.config.schema import NodeConfig
from corral.controller.power import (
    POWERED_DOWN,
    POWERING_DOWN,
    POWERING_UP,
    PowerManager,
    RateWindow,
)
from corral.controller.records import NodeRecord
from corral.core.decisions import Reserve
from corral.core.model.job import JobState
from corral.core.model.node import NodeSpec, NodeState


def test_rate_window_counts_the_last_minute() -> None:
    w = RateWindow()
    assert w.take(5, 3, now=100.0) == 3  # 3 per minute: 3 go, 2 wait
    assert w.take(2, 3, now=130.0) == 0  # still within the minute
    assert w.room(3, now=159.9) == 0
    assert w.take(2, 3, now=160.0) == 2  # the first three are a minute old
    assert w.take(9, 0, now=160.0) == 9  # 0: no limit
    w.note(1, now=200.0)  # an operator's action counts
    assert w.room(3, now=225.0) == 2 and w.room(3, now=260.0) == 3
    assert check_power(PowerConfig(resume_rate=-1))[0][0] == "power.resume_rate"


def _prog(path: Path) -> str:
    path.write_text(f'#!/bin/sh\necho "$1" >> {path}.log\n')
    path.chmod(0o755)
    return str(path)


def _job(node: str) -> Any:
    return SimpleNamespace(allocation=SimpleNamespace(node_names=[node]), configuring=False,
                           state=JobState.RUNNING, start_time=1000.0, end_time=None,
                           touch=lambda: None)


def test_node_up_ends_configuring_and_resets_the_start(tmp_path: Path) -> None:
    ctl = _ctl(tmp_path, ["c1", "c2"])
    pm = PowerManager(ctl, clock=lambda: 1500.0)
    for n in ("c1", "c2"):
        ctl.nodes.nodes[n].power, ctl.nodes.nodes[n].jobs = POWERED_DOWN, {7}
    rec = _job("c1")
    rec.allocation.node_names = ["c1", "c2"]
    ctl.jobs[7] = rec
    pm.started(rec)
    assert rec.configuring
    ctl.nodes.nodes["c1"].power = ""  # c1 registered, c2 still boots
    assert pm.node_up("c1") == [] and rec.configuring
    ctl.nodes.nodes["c2"].power = ""
    assert pm.node_up("c2") == [rec]
    assert not rec.configuring and rec.start_time == 1500.0
    assert pm.node_up("c2") == []  # once


def _ctl(tmp: Path, names: list[str], **power: Any) -> Any:
    cfg = PowerConfig(resume_program=_prog(tmp / "resume"),
                      suspend_program=_prog(tmp / "suspend"), **power)
    nodes = {n: NodeRecord(spec=NodeSpec(name=n), state=NodeState.IDLE) for n in names}
    triggers: list[int] = []
    return SimpleNamespace(
        cfg=SimpleNamespace(power=cfg, cluster_name="t",
                            scheduler=SimpleNamespace(bf_resolution_s=60)),
        nodes=SimpleNamespace(nodes=nodes, save=lambda n: None, get=nodes.__getitem__,
                              configured={n: NodeConfig(name=n) for n in names}),
        sched=SimpleNamespace(trigger=lambda: triggers.append(1)), jobs={})


async def _runs(log: Path, count: int) -> list[str]:
    """The program's runs once ``count`` are there (each is one host list)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lines = log.read_text().split() if log.exists() else []
        if len(lines) >= count:
            return lines
        await asyncio.sleep(0.01)
    raise AssertionError(f"{log}: {count} runs expected")


def test_resume_rate_lets_the_rest_wait_for_the_next_minute(tmp_path: Path) -> None:
    names = [f"c{i}" for i in range(1, 6)]

    async def go() -> None:
        ctl = _ctl(tmp_path, names, resume_rate=2)
        clock = [1000.0]
        pm = PowerManager(ctl, clock=lambda: clock[0])
        for i, n in enumerate(names):  # five jobs, one powered-down node each
            node = ctl.nodes.nodes[n]
            node.power, node.jobs = POWERED_DOWN, {i + 1}
            rec = _job(n)
            ctl.jobs[i + 1] = rec
            pm.started(rec)
            assert rec.configuring  # allocated on a powered-down node: CONFIGURING
        ctl.nodes.nodes["c5"].jobs = set()  # its job ended before its turn: never resumed
        pm.flush()
        assert [ctl.nodes.nodes[n].power for n in names] == [POWERING_UP] * 2 + \
            [POWERED_DOWN] * 3
        assert pm.waiting == ["c3", "c4"]
        assert await _runs(tmp_path / "resume.log", 1) == ["c[1-2]"]
        clock[0] += 59
        await pm.tick(clock[0])
        assert pm.waiting == ["c3", "c4"]  # no room yet
        clock[0] += 1
        await pm.tick(clock[0])  # a minute after the first resumes
        assert pm.waiting == [] and ctl.nodes.nodes["c4"].power == POWERING_UP
        assert ctl.nodes.nodes["c4"].power_deadline == clock[0] + 300
        assert ctl.nodes.nodes["c5"].power == POWERED_DOWN
        assert await _runs(tmp_path / "resume.log", 2) == ["c[1-2]", "c[3-4]"]

    asyncio.run(go())


def test_suspend_rate_powers_down_the_longest_idle_first(tmp_path: Path) -> None:
    names = ["n1", "n2", "n3"]

    async def go() -> None:
        ctl = _ctl(tmp_path, names, suspend_rate=1, suspend_time_s=10)
        pm = PowerManager(ctl, clock=lambda: 0.0)
        for n, since in (("n1", 50.0), ("n2", 20.0), ("n3", 30.0)):
            node = ctl.nodes.nodes[n]
            node.connected, node.idle_since = True, since
        await pm.tick(100.0)
        powers = {n: ctl.nodes.nodes[n].power for n in names}
        assert powers == {"n1": "", "n2": POWERING_DOWN, "n3": ""}  # idle since 20
        assert await _runs(tmp_path / "suspend.log", 1) == ["n2"]
        await pm.tick(130.0)
        assert ctl.nodes.nodes["n3"].power == ""  # one a minute
        await pm.tick(160.0)
        assert ctl.nodes.nodes["n3"].power == POWERING_DOWN
        assert ctl.nodes.nodes["n1"].power == ""
        assert await _runs(tmp_path / "suspend.log", 2) == ["n2", "n3"]
        # unlimited: every node that is due goes at once
        ctl.cfg.power = PowerConfig(resume_program=ctl.cfg.power.resume_program,
                                    suspend_program=ctl.cfg.power.suspend_program,
                                    suspend_time_s=10, suspend_rate=0)
        await pm.tick(161.0)
        assert ctl.nodes.nodes["n1"].power == POWERING_DOWN
        assert await _runs(tmp_path / "suspend.log", 3) == ["n2", "n3", "n1"]

    asyncio.run(go())


def test_boot_time_plans_resume_just_the_planned_nodes_within_the_rate(
        tmp_path: Path) -> None:
    """``boot_time_s``: the nodes the planned starts need are resumed (``plan``), at most
    ``resume_rate`` a minute; one that no plan needs any more is not resumed."""
    names = ["c1", "c2", "c3", "c4"]

    async def go() -> None:
        ctl = _ctl(tmp_path, names, resume_rate=1, boot_time_s=120, resume_timeout_s=300)
        pm = PowerManager(ctl, clock=lambda: 0.0)
        for n in names:
            ctl.nodes.nodes[n].power = POWERED_DOWN
        ctl.nodes.configured["c4"] = NodeConfig(name="c4", boot_time_s=30)  # its own
        assert pm.boot_ready(1000.0) == {"c1": 1120.0, "c2": 1120.0, "c3": 1120.0,
                                         "c4": 1030.0}
        plans = [Reserve(1, 1120.0, ("c1",), 1720.0), Reserve(2, 1120.0, ("c2",), 1720.0),
                 Reserve(3, 9000.0, ("c3",), 9600.0)]  # job 3 waits for others first
        pm.plan(plans, 1000.0)
        assert ctl.nodes.nodes["c1"].power == POWERING_UP and pm.waiting == ["c2"]
        assert await _runs(tmp_path / "resume.log", 1) == ["c1"]
        # a powering-up node is expected at its resume + boot_time_s (not before now + 1)
        assert pm.boot_ready(1010.0)["c1"] == 1120.0 and pm.boot_ready(1200.0)["c1"] == 1201.0
        pm.plan([], 1070.0)  # job 2 went away: c2 is not resumed, even with room now
        assert pm.waiting == [] and ctl.nodes.nodes["c2"].power == POWERED_DOWN
        pm.plan(plans[1:2], 1080.0)
        assert ctl.nodes.nodes["c2"].power == POWERING_UP
        assert [ctl.nodes.nodes[n].power for n in ("c3", "c4")] == [POWERED_DOWN] * 2
        assert await _runs(tmp_path / "resume.log", 2) == ["c1", "c2"]

    asyncio.run(go())


def test_boot_time_keys_are_read_and_checked() -> None:
    nodes = [{"name": "cloud[1-2]", "cloud": True, "cpus": 2, "mem_mb": 100,
              "boot_time_s": 45}]
    cfg = parse_config({"nodes": nodes, "power": {"resume_program": "/bin/true",
                                                  "boot_time_s": 120}})
    assert cfg.power.boot_time_s == 120 and cfg.node_configs()["cloud2"].boot_time_s == 45
    with pytest.raises(ConfigError, match=r"nodes\[0\].boot_time_s"):
        parse_config({"nodes": [dict(nodes[0], boot_time_s=-1)]})
    with pytest.raises(ConfigError, match="power.boot_time_s"):
        parse_config({"power": {"boot_time_s": -5}})
