"""A task group's own minimum counts when the job gives none (issue 14): the job starts
with the group's minimum, and a group larger than the partition is accepted when its
minimum fits."""

from __future__ import annotations

from builders import cluster, config, job

from corral.core import run_cycle
from corral.core.feasibility import validate


def _two_cpus() -> object:
    return cluster(nodes=1, sockets=1, cores_per_socket=2, mem_mb=4000)


def test_group_minimum_starts_the_job_on_what_is_free() -> None:
    c = _two_cpus()
    busy = job(1).walltime_s(100).running_on(("n001", 1), start=0.0).build()
    gang = job(2).group("w", replicas=2, cpus=1, min_available=1).walltime_s(60).submit(1)
    r = run_cycle(c.snapshot(pending=[gang.build()], running=[busy]), config(), 10.0)
    assert [s.job_id for s in r.starts] == [2]
    assert r.starts[0].allocation.tasks == 1


def test_group_without_minimum_still_waits_whole() -> None:
    c = _two_cpus()
    busy = job(1).walltime_s(100).running_on(("n001", 1), start=0.0).build()
    gang = job(2).group("w", replicas=2, cpus=1).walltime_s(60).submit(1).build()
    r = run_cycle(c.snapshot(pending=[gang], running=[busy]), config(), 10.0)
    assert not r.starts and r.pending[2].reason == "Resources"
    assert "it needs 2 CPUs" in r.pending[2].detail


def test_group_larger_than_the_partition_is_accepted_when_its_minimum_fits() -> None:
    c = _two_cpus()
    ok = job(3).group("w", replicas=4, cpus=1, min_available=1).walltime_s(60).build()
    snap = c.snapshot(pending=[ok])
    assert validate(ok.spec, snap, config()) is None
    r = run_cycle(snap, config(), 10.0)
    assert [s.allocation.tasks for s in r.starts] == [2]
    too_big = job(4).group("w", replicas=4, cpus=1, min_available=3).walltime_s(60).build()
    rej = validate(too_big.spec, c.snapshot(pending=[too_big]), config())
    assert rej is not None and "task group 'w'" in rej.message
