"""Fair-share ledger: charges decay with the half-life and survive a save/load."""

from __future__ import annotations

from corral.controller.records import JobRecord
from corral.controller.usage import UsageLedger
from corral.core.model.account import AccountTree
from corral.core.model.job import Allocation, JobSpec, JobState, NodeAllocation
from corral.submission import JobSubmission


def _job(start: float, end: float | None, cpus: int, account: str = "a") -> JobRecord:
    sub = JobSubmission(spec=JobSpec(user="u", account=account), argv=("true",))
    rec = JobRecord(id=1, sub=sub, submit_time=start, state=JobState.COMPLETED,
                    start_time=start, end_time=end)
    rec.allocation = Allocation("p", (NodeAllocation("n", tuple(range(cpus)), cpus, 0),))
    return rec


def test_charge_decay_and_roundtrip() -> None:
    led = UsageLedger(AccountTree(), half_life_s=100.0)
    led.charge(_job(0.0, 10.0, 4), now=10.0)
    v10 = led.view(10.0, [])[("a", "u")]
    assert 38.0 < v10 < 40.0  # ~4 CPUs x 10 s, slightly decayed within the run
    v110 = led.view(110.0, [])[("a", "u")]
    assert abs(v110 - v10 / 2) < 1e-6  # one half-life later: half
    running = _job(100.0, None, 2, account="b")
    with_running = led.view(110.0, [running])
    assert 19.0 < with_running[("b", "u")] < 20.0 and ("b", "u") not in led.usage
    copy = UsageLedger(AccountTree(), half_life_s=100.0)
    copy.load_json(led.to_json())
    assert copy.view(210.0, []) == led.view(210.0, [])
