from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from priority_helpers import job

from corral.core.model import AccountTree, Allocation, Association, NodeAllocation
from corral.core.model.job import JobState
from corral.core.priority.decay import (
    add_job_charge,
    association_of,
    charge_cpu_seconds,
    decay,
    decay_all,
    decay_factor,
)

DAY = 86400.0


def test_half_life_halves() -> None:
    assert decay(100.0, 7 * DAY, 7 * DAY) == pytest.approx(50.0)
    assert decay(100.0, 14 * DAY, 7 * DAY) == pytest.approx(25.0)
    assert decay(100.0, 0, 7 * DAY) == 100.0


def test_zero_half_life_disables_decay() -> None:
    assert decay(100.0, 30 * DAY, 0) == 100.0
    assert decay_factor(5.0, -1) == 1.0


@given(
    st.floats(0, 1e12),
    st.floats(0, 1e8),
    st.floats(0, 1e8),
    st.floats(1, 1e8),
)
def test_decay_composes(usage: float, a: float, b: float, half_life: float) -> None:
    stepped = decay(decay(usage, a, half_life), b, half_life)
    assert stepped == pytest.approx(decay(usage, a + b, half_life), rel=1e-9, abs=1e-300)


def test_charge_without_decay_is_cpu_seconds() -> None:
    assert charge_cpu_seconds(4, 100.0, 200.0, 1000.0, 0) == 400.0
    assert charge_cpu_seconds(4, 100.0, 200.0, 150.0, 0) == 200.0  # clipped at now
    assert charge_cpu_seconds(4, 100.0, 200.0, 1000.0, 0, usage_factor=0.5) == 200.0
    assert charge_cpu_seconds(4, 200.0, 100.0, 1000.0, DAY) == 0.0


def test_charge_with_decay_is_less_but_close_for_short_runs() -> None:
    full = charge_cpu_seconds(1, 0.0, 60.0, 60.0, 7 * DAY)
    assert 59.99 < full < 60.0
    # a run long ago counts about half after one half-life
    old = charge_cpu_seconds(1, 0.0, 60.0, 60.0 + 7 * DAY, 7 * DAY)
    assert old == pytest.approx(full / 2)


@given(st.floats(0, 1e6), st.floats(0, 1e6), st.floats(0, 1e6), st.floats(60, 1e7))
def test_charging_in_slices_equals_charging_once(a: float, b: float, later: float,
                                                 half_life: float) -> None:
    start, mid, end = 0.0, a, a + b
    now = end + later
    whole = charge_cpu_seconds(8, start, end, now, half_life)
    # slice 1 charged at mid then decayed to now; slice 2 charged at end then decayed
    s1 = decay(charge_cpu_seconds(8, start, mid, mid, half_life), now - mid, half_life)
    s2 = decay(charge_cpu_seconds(8, mid, end, end, half_life), now - end, half_life)
    assert s1 + s2 == pytest.approx(whole, rel=1e-7, abs=1e-6)


def test_association_of() -> None:
    tree = AccountTree(associations=(
        Association("ann", "phys"), Association("ann", "chem", is_default=True),
        Association("bob", "bio"),
    ))
    assert association_of(job(1, user="ann", account="phys").spec, tree) == ("phys", "ann")
    assert association_of(job(1, user="ann").spec, tree) == ("chem", "ann")
    assert association_of(job(1, user="bob").spec, tree) == ("bio", "bob")
    assert association_of(job(1, user="zed").spec, tree) == ("root", "zed")


def test_add_job_charge_uses_the_allocation_and_window() -> None:
    alloc = Allocation("batch", (NodeAllocation("n01", (0, 1), 2, 100),
                                 NodeAllocation("n02", (0, 1), 2, 100)))
    j = job(7, user="ann", account="phys", ntasks=1, state=JobState.RUNNING, start_time=100.0,
            allocation=alloc)
    usage = {("phys", "ann"): 10.0, ("bio", "bob"): 5.0}
    out = add_job_charge(usage, j, AccountTree(), since=150.0, now=250.0, half_life_s=0)
    assert out == {("phys", "ann"): 10.0 + 4 * 100.0, ("bio", "bob"): 5.0}
    assert usage[("phys", "ann")] == 10.0  # input untouched
    # a finished job is charged only up to its end; a pending one not at all
    done = job(8, user="bob", account="bio", ntasks=3, start_time=0.0, end_time=50.0)
    assert add_job_charge({}, done, AccountTree(), 0.0, 500.0, 0)[("bio", "bob")] == 150.0
    assert add_job_charge({}, job(9, user="x"), AccountTree(), 0.0, 500.0, 0) == {}


def test_decay_all() -> None:
    out = decay_all({("a", "u"): 8.0, ("b", "v"): 2.0}, 2 * DAY, DAY)
    assert out == {("a", "u"): pytest.approx(2.0), ("b", "v"): pytest.approx(0.5)}
    assert math.isclose(sum(out.values()), 2.5)
