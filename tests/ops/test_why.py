"""explain_pending: a pending job in plain words."""

from __future__ import annotations

from corral.core.config import Ordering
from corral.core.priority import Factor, PriorityFactors
from corral.ops.why import explain_pending, factors_to_json, relative
from tests.ops.records import record

NOW = 1_700_000_000.0


def pending(**kw: object) -> dict[str, object]:
    base = record(42, state="PENDING", submit=NOW - 600, start=None, end=None)
    base.update(kw)
    return base


def test_resources_with_detail_rank_estimate_and_factors() -> None:
    f = PriorityFactors(42, (Factor("age", 0.5, 1000), Factor("fairshare", 0.25, 10000),
                             Factor("qos", 0.0, 0)), site=0, nice=0, computed=3000.0,
                        admin_priority=None, total=3000.0)
    job = pending(reason="Resources", rank=3, est_start=NOW + 300,
                  reason_detail="not enough free resources in partition batch (2 cores "
                                "free now; it needs 4 CPUs); expected to start at "
                                f"t={NOW + 300:.0f}")
    lines = explain_pending(job, f, now=NOW, pending_total=7)
    text = "\n".join(lines)
    assert lines[0].startswith("Job 42 is pending (Resources): it is next in line")
    assert "2 cores free now; it needs 4 CPUs" in text
    assert "t=" not in text  # epoch times became clock times
    assert "Priority: 3000 = fairshare 2500 (0.25 x 10000), age 500 (0.50 x 1000)." in lines
    assert "Place in queue: 3 of 7 pending jobs (2 jobs ahead of it)." in lines
    assert any(s.startswith("Estimated start: ") and "(in 5 min)" in s for s in lines)
    assert any(s.startswith("Waiting since ") and "10 min ago" in s for s in lines)
    # the JSON form of the factors gives the same line
    assert explain_pending(job, factors_to_json(f), now=NOW, pending_total=7) == lines


def test_holds_dependencies_limits_and_never() -> None:
    held = explain_pending(pending(reason="JobHeldUser"), now=NOW)
    assert "held by its owner" in held[0] and any("release" in s for s in held)
    dep = explain_pending(pending(reason="Dependency", dependency="afterok:12",
                                  reason_detail="afterok:12 is RUNNING"), now=NOW)
    assert "It depends on: afterok:12." in dep
    lim = explain_pending(pending(reason="QOSMaxCpuPerUserLimit"), now=NOW)
    assert "the limit of its QOS on CPUs per user is reached" in lim[0]
    never = explain_pending(pending(reason="PartitionTimeLimit",
                                    reason_detail="time limit 2-00:00:00 > 1-00:00:00"), now=NOW)
    assert "can never run as asked" in never[0] and "Cancel it" in never[-1]
    unknown = explain_pending(pending(reason="SomethingNew"), now=NOW)
    assert "the scheduler reports SomethingNew" in unknown[0]


def test_admin_priority_and_research_ordering() -> None:
    f = PriorityFactors(42, (), 0, 0, 0.0, admin_priority=99, total=99.0)
    assert "set by an administrator" in explain_pending(pending(reason="Priority"), f,
                                                        now=NOW)[-3]
    g = PriorityFactors(42, (Factor("age", 1.0, 10),), 0, 0, 10.0, None, 5.0, Ordering.SJF)
    text = " ".join(explain_pending(pending(reason="Priority"), g, now=NOW))
    assert "ordered by sjf" in text.lower()


def test_not_pending_and_relative() -> None:
    lines = explain_pending(record(5, state="RUNNING", start=NOW - 60, end=None), now=NOW)
    assert len(lines) == 1 and "RUNNING" in lines[0] and "on n1" in lines[0]
    assert relative(0.2) == "now" and relative(-7200) == "2.0 h ago"
    assert relative(3 * 86400) == "in 3.0 days"
