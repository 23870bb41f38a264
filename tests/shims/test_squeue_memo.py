"""squeue's per-record memo (``corral.shims.squeue_memo``): the controller hands squeue the
same record objects call after call until a job changes; what squeue prints from them must
be exactly what it prints from fresh copies, whatever changed in between."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from corral.shims.squeue_memo import ANSWERS, VIEWS_PER_ROW, Memo
from tests.shims.fakes import FakeClient, job
from tests.shims.scenario import NOW, finished_records, queue_records, run


class SameObjects(FakeClient):
    """The controller's way: the very same dicts every call (``JobRecord.to_api``)."""

    def jobs(self, user: str | None = None, states: Iterable[str] | None = None,
             partition: str | None = None, ids: Iterable[int | str] | None = None, *,
             account: str | None = None, name: str | None = None,
             include_finished: bool = False,
             fields: Iterable[str] | None = None) -> list[dict[str, Any]]:
        return list(self.records)


ARGVS = [[], ["-l"], ["-h", "-o", "%i %t %M %L %j %R"], ["--sort=-i,P"], ["-t", "all"],
         ["-r"], ["-u", "root", "-o", "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"],
         ["--start"], ["-p", "debug", "-n", "needs_all64"], ["-h", "-j", "4", "-o", "%i %t"]]


@pytest.mark.parametrize("argv", ARGVS, ids=[" ".join(a) or "default" for a in ARGVS])
def test_memoized_output_is_the_fresh_output(argv: list[str]) -> None:
    records = queue_records() + finished_records()
    same = SameObjects(records)
    fresh = run("squeue", argv, FakeClient(records))
    for _ in range(3):  # the first call fills the memo, the others read it
        assert run("squeue", argv, same) == fresh
    later = NOW + 3725  # a running job's times move on; a pending one's do not
    assert run("squeue", argv, same, now=later) == run("squeue", argv, FakeClient(records),
                                                       now=later)


def test_a_changed_job_is_shown_as_it_is_now() -> None:
    same = SameObjects([job(1, name="first"), job(2, name="second", priority=5.0)])
    records = same.records
    argv = ["-h", "-o", "%i %j %t %r"]
    assert run("squeue", argv, same)[0] == "2 second PD Priority\n1 first PD Priority\n"
    # the controller drops a changed job's cached record: a new dict comes next time
    records[1] = job(2, name="second", priority=0.5, reason="Resources")
    records.append(job(3, name="third", priority=9.0))
    assert run("squeue", argv, same)[0] == (
        "3 third PD Priority\n1 first PD Priority\n2 second PD Resources\n")
    records.pop(0)
    assert run("squeue", argv, same)[0] == "3 third PD Priority\n2 second PD Resources\n"


def test_the_memo_keeps_only_the_last_calls_rows_and_tells_views_apart() -> None:
    memo = Memo()
    calls: list[str] = []

    def compute(view: str) -> Any:
        def f(row: dict[str, Any]) -> str:
            calls.append(f"{view}:{row['id']}")
            return f"{view}{row['id']}"
        return f

    a, b = {"id": 1}, {"id": 2}
    assert memo.results([a, b], "v", compute("v")) == ["v1", "v2"]
    assert memo.results([a, b], "v", compute("v")) == ["v1", "v2"]
    assert calls == ["v:1", "v:2"]  # the second call computed nothing
    assert memo.results([a], "w", compute("w")) == ["w1"]  # another view: computed
    assert memo.results([a], "v", compute("v")) == ["v1"]  # both views kept per row
    assert calls == ["v:1", "v:2", "w:1"]
    assert memo.results([b], "v", compute("v")) == ["v2"]  # b was not in the last call
    assert calls[-1] == "v:2"
    equal = {"id": 1}  # equal content, another object: never taken for ``a``
    assert memo.results([equal], "v", compute("v")) == ["v1"] and calls[-1] == "v:1"
    for k in range(VIEWS_PER_ROW + 2):  # a row keeps a bounded number of views
        memo.results([equal], f"x{k}", compute(f"x{k}"))
    assert len(memo._table[id(equal)][1]) <= VIEWS_PER_ROW


def test_a_whole_answer_is_reused_only_for_the_same_records_in_the_same_order() -> None:
    memo = Memo()
    a, b = {"id": 1}, {"id": 2}
    memo.keep_answer([a, b], "v", "1\n2")
    assert memo.same_answer([a, b], "v") == "1\n2"
    assert memo.same_answer([b, a], "v") is None  # another order
    assert memo.same_answer([a, {"id": 2}], "v") is None  # a changed (new) record
    assert memo.same_answer([a], "v") is None and memo.same_answer([a, b], "w") is None
    for k in range(ANSWERS + 3):  # a bounded number of views' answers
        memo.keep_answer([a], f"x{k}", str(k))
    assert len(memo._answers) == ANSWERS and memo.same_answer([a, b], "v") is None


def test_an_unchanged_pending_queue_is_answered_again_at_any_time() -> None:
    same = SameObjects([job(i, name=f"j{i}", priority=float(i)) for i in range(1, 6)])
    argv = ["-h", "-o", "%i %j %M %L"]
    first = run("squeue", argv, same)
    assert first[0].splitlines()[0] == "5 j5 0:00 UNLIMITED"
    assert run("squeue", argv, same, now=NOW + 86400) == first  # nothing in it moves
    same.records[2] = job(3, name="renamed", priority=3.0)
    assert "3 renamed 0:00 UNLIMITED" in run("squeue", argv, same)[0].splitlines()


def test_calls_that_differ_in_any_option_never_share_an_answer() -> None:
    """The same records, one call after another with options that change only the order,
    the header, the array collapsing or the selection: each prints its own answer. Pending
    jobs only, so that every answer is kept whole (no line depends on the time)."""
    records = [r for r in queue_records() if not r.get("start_time")]
    assert len(records) > 5 and any(r.get("array_job_id") for r in records)
    same = SameObjects(records)
    sequence = [["-o", "%i %t"], ["-h", "-o", "%i %t"], ["--sort=i", "-o", "%i %t"],
                ["--sort=-i", "-o", "%i %t"], ["-r", "-o", "%i %t"], ["-o", "%i %t"],
                ["--start"], ["-t", "PD", "-o", "%i %t"], ["-o", "%i %t"]]
    fresh = {" ".join(a): run("squeue", a, FakeClient(records)) for a in sequence}
    for argv in sequence * 2:  # (no fresh call in between: it would replace the answers)
        assert run("squeue", argv, same) == fresh[" ".join(argv)], argv
