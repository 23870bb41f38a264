"""Job id words and the index that matches many refs against records at once."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.shims.ids import JobRef, RefIndex, parse_job_refs, ref_matches
from corral.shims.sacct_select import choose, parse_selections, selection_index

refs_st = st.lists(st.builds(
    JobRef, word=st.just("w"), base=st.integers(1, 6),
    tasks=st.none() | st.frozensets(st.integers(0, 4), min_size=1, max_size=3)),
    max_size=8)


@st.composite
def records(draw: Any) -> dict[str, Any]:
    jid = draw(st.integers(1, 9))
    if draw(st.booleans()):  # an array task: its array's id is its own or a smaller one
        return {"id": jid, "array_job_id": draw(st.integers(1, jid)),
                "array_task_id": draw(st.integers(0, 4))}
    return {"id": jid, "array_job_id": None, "array_task_id": None}


@settings(max_examples=300, deadline=None)
@given(refs_st, records())
def test_the_index_names_exactly_what_a_scan_of_the_refs_names(
        refs: list[JobRef], rec: dict[str, Any]) -> None:
    scan = [i for i, ref in enumerate(refs) if ref_matches(ref, rec)]
    index = RefIndex(refs)
    assert index.matching(rec) == scan
    assert index.names(rec) == bool(scan)


def test_a_bare_number_names_the_job_and_every_task_of_its_array() -> None:
    index = RefIndex(parse_job_refs(["7,9_[1-2]"]))
    assert index.names({"id": 7, "array_job_id": None})
    assert index.names({"id": 12, "array_job_id": 7, "array_task_id": 3})
    assert index.names({"id": 10, "array_job_id": 9, "array_task_id": 2})
    assert not index.names({"id": 11, "array_job_id": 9, "array_task_id": 3})
    assert not index.names({"id": 9, "array_job_id": None})


def test_choose_with_the_index_reads_the_selections_in_the_order_given() -> None:
    rec = {"id": 5, "array_job_id": None, "array_task_id": None}
    for words, want in ((["5.3,5"], (True, {"3"})), (["5,5.3"], (True, None)),
                        (["5.batch"], (False, {"batch"})), (["6"], (True, None))):
        sels = parse_selections(words)
        assert choose(sels, rec, selection_index(sels)) == choose(sels, rec) == want
