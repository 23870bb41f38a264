"""A heterogeneous cluster from a corral.toml, and fair share through the engine."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from corral.core.config import BackfillMode, Ordering, SchedulerConfig
from corral.sim.cluster import account_tree_for, from_config, from_header
from corral.sim.engine import EngineOptions, simulate
from corral.sim.result import COMPLETED, REJECTED

from .test_engine import wl_of

TOML = """
cluster_name = "simtest"

[scheduler]
ordering = "sjf"
backfill = "conservative"

[[nodes]]
name = "cpu[01-04]"
cpus = 8
mem_mb = "32G"

[[nodes]]
name = "gpu[1-2]"
sockets = 2
cores_per_socket = 4
mem_mb = "64G"
gpus = 4
gpu_type = "a100"
features = ["avx512"]

[[partitions]]
name = "batch"
nodes = "cpu[01-04]"
default = true
max_time_s = "1:00:00"

[[partitions]]
name = "gpu"
nodes = "gpu[1-2]"
"""


def test_cluster_from_config(tmp_path: Path) -> None:
    p = tmp_path / "corral.toml"
    p.write_text(TOML)
    cl = from_config(p)
    assert cl.total_nodes == 6 and cl.total_cpus == 48
    gpu = [n for n in cl.nodes if n.name == "gpu1"][0]
    assert gpu.spec.capacity.gpus == 4 and gpu.spec.sockets == 2
    assert gpu.partitions == ("gpu",)
    assert cl.scheduler is not None and cl.scheduler.ordering is Ordering.SJF
    # SWF jobs go to the default partition (4 x 8 cores, at most one hour)
    rows = [(0, 100, 100, 16), (1, 100, 100, 32), (2, 100, 7200, 4), (3, 50, 50, 40)]
    res = simulate(wl_of(rows, 6, 48), cl, EngineOptions(config=cl.scheduler))
    assert res.state.tolist() == [COMPLETED, COMPLETED, REJECTED, REJECTED]
    assert res.start_s[0] == 0 and res.start_s[1] == 100  # 16 + 32 > 32 cores of batch


def test_fair_share_reorders_heavy_users_job() -> None:
    """User 1 has used the machine for a day; both users then queue a job. With fair
    share, user 2 goes first although user 1 submitted earlier; without it, FCFS-like
    age wins."""
    rows = [(0, 86400, 86400, 4), (86000, 100, 100, 4), (86001, 100, 100, 4)]
    cl = from_header(4, 4)
    base = SchedulerConfig(ordering=Ordering.MULTIFACTOR, backfill=BackfillMode.EASY)
    fs = simulate(wl_of(rows, users=[1, 1, 2]), cl, EngineOptions(config=base))
    assert fs.start_s.tolist() == [0, 86500, 86400]
    import dataclasses

    nofs_cfg = dataclasses.replace(base, weights=dataclasses.replace(base.weights,
                                                                     fairshare=0))
    nofs = simulate(wl_of(rows, users=[1, 1, 2]), cl, EngineOptions(config=nofs_cfg))
    assert nofs.start_s.tolist() == [0, 86400, 86500]
    assert np.isfinite(fs.end_s).all()


def test_account_tree_for_adds_trace_associations() -> None:
    t = account_tree_for([("g1", "u1"), ("g1", "u2"), ("g2", "u1")])
    assert {a.name for a in t.accounts} == {"g1", "g2"}
    defaults = {(a.user, a.account) for a in t.associations if a.is_default}
    assert defaults == {("u1", "g1"), ("u2", "g1")}


PREEMPT_TOML = """
[scheduler]
ordering = "fcfs"
backfill = "easy"

[preemption]
type = "partition_prio"
mode = "requeue"

[[nodes]]
name = "n[1-2]"
cpus = 2
mem_mb = "8G"

[[partitions]]
name = "low"
nodes = "n[1-2]"
default = true
priority_tier = 1
preempt_mode = "requeue"

[[partitions]]
name = "high"
nodes = "n[1-2]"
priority_tier = 2
"""


def preempt_toml(mode: str = "requeue") -> str:
    """``PREEMPT_TOML`` with preemption by ``requeue``, or by ``cancel`` after a 30 s grace."""
    if mode == "requeue":
        return PREEMPT_TOML
    text = PREEMPT_TOML.replace('type = "partition_prio"\nmode = "requeue"',
                                f'type = "partition_prio"\nmode = "{mode}"\ngrace_s = 30')
    return text.replace('preempt_mode = "requeue"', f'preempt_mode = "{mode}"')


def test_queue_map_and_preemption_requeue(tmp_path: Path) -> None:
    """A high-tier job (SWF queue 0) preempts a low-tier one (queue 1), which is requeued
    and runs again from the start once the machine is free."""
    import pytest

    from corral.sim.cluster import ClusterError

    p = tmp_path / "corral.toml"
    p.write_text(PREEMPT_TOML)
    cl = from_config(p).with_queue_map("0=high,1=low")
    assert cl.queue_map == {0: "high", 1: "low"}
    wl = wl_of([(0, 1000, 1000, 4), (10, 100, 100, 4)], 2, 4)
    wl = dataclasses.replace(wl, queue_id=np.array([1, 0]))
    assert cl.scheduler is not None
    res = simulate(wl, cl, EngineOptions(config=cl.scheduler))
    assert res.start_s[1] == 10 and res.end_s[1] == 110
    assert res.start_s[0] == 110 and res.end_s[0] == 1110  # requeued, ran again in full
    assert res.state.tolist() == [COMPLETED, COMPLETED]
    with pytest.raises(ClusterError, match="partition 'gpu' does not exist"):
        cl.with_queue_map("0=gpu")
    with pytest.raises(ClusterError, match="use QUEUE=PARTITION"):
        cl.with_queue_map("high")


def test_preemption_cancel_after_grace(tmp_path: Path) -> None:
    """CANCEL with a 30 s grace: the victim is signalled at t=10, holds its cores until
    t=40 (and is not picked twice), ends PREEMPTED; the preemptor starts at t=40."""
    from corral.sim.result import PREEMPTED

    p = tmp_path / "corral.toml"
    p.write_text(preempt_toml("cancel"))
    cl = from_config(p).with_queue_map("0=high,1=low")
    wl = wl_of([(0, 1000, 1000, 4), (10, 100, 100, 4), (20, 50, 50, 2)], 2, 4)
    wl = dataclasses.replace(wl, queue_id=np.array([1, 0, 0]))
    assert cl.scheduler is not None
    res = simulate(wl, cl, EngineOptions(config=cl.scheduler))
    assert res.state[0] == PREEMPTED and res.end_s[0] == 40
    assert res.start_s[1] == 40
    assert res.start_s[2] >= 140 or res.start_s[2] == 40  # never over the 4 cores
    busy = [(res.start_s[k], res.end_s[k], 4 if k < 2 else 2) for k in range(3)]
    for t in (39.0, 40.0, 100.0):
        assert sum(c for a, b, c in busy if a <= t < b) <= 4
