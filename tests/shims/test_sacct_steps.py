"""sacct's step selection (``-j 5.3``, ``5.batch``, ``5_2.1``) and the step rows' usage
fields (TotalCPU, MaxRSS*, AveRSS, AveCPU, MinCPU*), on in-memory records."""

from __future__ import annotations

from typing import Any

import pytest

from corral.shims import slurmfmt as sf
from corral.shims.ids import IdError
from corral.shims.sacct_select import Selection, StepError, choose, parse_selections
from tests.shims.fakes import FakeClient, job
from tests.shims.scenario import NOW, run

T0 = NOW - 100


def _step(step_id: int, nodes: list[str], tasks: list[list[int]],
          usage: dict[str, Any] | None, **kw: Any) -> dict[str, Any]:
    st: dict[str, Any] = {
        "step_id": step_id, "job_id": 5, "restarts": 0, "name": "work", "argv": ["work"],
        "ntasks": sum(len(t) for t in tasks), "nodes": nodes, "num_cpus": 4,
        "start_time": T0 + 1, "end_time": T0 + 3, "state": "COMPLETED", "exit_code": 0,
        "signal": 0, "pid": None, "node_tasks": tasks, "usage": usage,
        "cpu_time_s": usage["cpu_time_s"] if usage else None,
        "max_rss_mb": usage["max_rss_mb"] if usage else None}
    st.update(kw)
    return st


def _use(per: dict[str, tuple[float, float, int]]) -> dict[str, Any]:
    nodes = {n: {"node": n, "cpu_time_s": c, "max_rss_mb": r, "pids": list(range(1, k + 1))}
             for n, (c, r, k) in per.items()}
    return {"nodes": nodes, "cpu_time_s": sum(c for c, _r, _k in per.values()),
            "max_rss_mb": max(r for _c, r, _k in per.values())}


def _client() -> FakeClient:
    steps = [
        # one task per node: every per-task figure is known
        _step(0, ["n1", "n2"], [[0], [1]], _use({"n1": (1.5, 1234 / 1024, 1),
                                                 "n2": (2.25, 2.0, 1)})),
        # two tasks on n1: MaxRSSTask/AveRSS/MinCPU are not derivable
        _step(1, ["n1", "n2"], [[0, 1], [2]], _use({"n1": (3.0, 3.0, 2),
                                                    "n2": (0.5, 1.5, 1)})),
        # srun heard from no node
        _step(2, ["n1"], [[0]], None, state="FAILED", exit_code=1),
    ]
    recs = [
        job(5, name="with_steps", state="COMPLETED", nodes=["n1", "n2"], num_nodes=2,
            start_time=T0, end_time=T0 + 5, exit_code=0, cpu_time_s=0.75,
            max_rss_mb=1.5, steps=steps),
        job(6, name="plain", state="COMPLETED", nodes=["n1"], start_time=T0,
            end_time=T0 + 5, exit_code=0, steps=[]),
        job(8, name="arr", array=8, task=1, state="COMPLETED", nodes=["n1"], start_time=T0,
            end_time=T0 + 5, exit_code=0, steps=[]),
        job(9, name="arr", array=8, task=2, state="COMPLETED", nodes=["n2"], start_time=T0,
            end_time=T0 + 5, exit_code=0,
            steps=[dict(_step(0, ["n2"], [[0]], None), job_id=9),
                   dict(_step(1, ["n2"], [[0]], _use({"n2": (0.0, 0.5, 1)})), job_id=9)]),
    ]
    return FakeClient(recs)


def _sacct(*argv: str) -> tuple[list[str], str, int]:
    out, err, rc = run("sacct", list(argv), _client())
    return out.splitlines(), err, rc


# ---- parsing ------------------------------------------------------------------------

def test_step_words_parse_as_slurm_reads_them() -> None:
    sels = parse_selections(["5.3,5.batch", "6", "5_2.1", "7.extern", "7.03", "8_[1-2].0"])
    assert [(s.ref.base, s.ref.tasks, s.step) for s in sels] == [
        (5, None, "3"), (5, None, "batch"), (6, None, None), (5, frozenset({2}), "1"),
        (7, None, "extern"), (7, None, "3"), (8, frozenset({1, 2}), "0")]
    for bad, job_part in (("5.foo", "5"), ("5_2.x1", "5_2"), ("5.99999999999", "5")):
        with pytest.raises(StepError) as info:
            parse_selections([bad])
        assert info.value.job == job_part
    with pytest.raises(IdError):
        parse_selections(["abc.1"])


def test_choose_follows_slurmdbd_order() -> None:
    rec = {"id": 5, "array_job_id": None, "array_task_id": None}

    def pick(*words: str) -> tuple[bool, set[str] | None]:
        sels: list[Selection] = parse_selections(list(words))
        return choose(sels, rec)

    assert pick() == (True, None)
    assert pick("5") == (True, None)
    assert pick("5.3") == (False, {"3"})
    assert pick("5.batch,5.0") == (False, {"batch", "0"})
    assert pick("5.0,5") == (True, {"0"})  # Slurm stops at "5" with the steps read so far
    assert pick("5,5.0") == (True, None)
    assert pick("6.1,5") == (True, None)  # another job's selections do not count
    task = {"id": 9, "array_job_id": 8, "array_task_id": 2}
    assert choose(parse_selections(["8_2.1"]), task) == (False, {"1"})
    assert choose(parse_selections(["8.batch"]), task) == (False, {"batch"})
    assert choose(parse_selections(["9.batch"]), task) == (False, {"batch"})


# ---- selection ------------------------------------------------------------------------

def test_j_step_prints_only_that_step() -> None:
    lines, _, rc = _sacct("-P", "-o", "JobID,NodeList,NTasks,NNodes,State", "-j", "5.1")
    assert rc == 0 and lines == ["JobID|NodeList|NTasks|NNodes|State",
                                 "5.1|n[1-2]|3|2|COMPLETED"]
    lines, _, _ = _sacct("-P", "-n", "-o", "JobID,NodeList,NTasks", "-j", "5.batch")
    assert lines == ["5.batch|n1|1"]
    lines, _, _ = _sacct("-P", "-n", "-o", "JobID", "-j", "5")
    assert lines == ["5", "5.batch", "5.0", "5.1", "5.2"]
    lines, _, _ = _sacct("-P", "-n", "-o", "JobID", "-j", "5.0,6", "-j", "5.2")
    assert lines == ["5.0", "5.2", "6", "6.batch"]
    lines, _, _ = _sacct("-P", "-n", "-o", "JobID,JobIDRaw", "-j", "8_2.1")
    assert lines == ["8_2.1|9.1"]
    lines, _, _ = _sacct("-P", "-n", "-o", "JobID", "-j", "8.batch")
    assert lines == ["8_1.batch", "8_2.batch"]
    # -X reads no steps: the job's row (Slurm's show_full stays set)
    lines, _, _ = _sacct("-P", "-n", "-X", "-o", "JobID", "-j", "5.1")
    assert lines == ["5"]


def test_unknown_step_prints_nothing() -> None:
    lines, err, rc = _sacct("-P", "-o", "JobID,State", "-j", "5.99")
    assert (lines, err, rc) == (["JobID|State"], "", 0)
    lines, err, rc = _sacct("-P", "-n", "-j", "6.0,5.extern")
    assert (lines, err, rc) == ([], "", 0)
    out, err, rc = run("sacct", ["-j", "5.99"], _client())
    assert rc == 0 and out.splitlines() == [  # sacct_acct_nonexistent_job.txt's header
        "JobID           JobName  Partition    Account  AllocCPUS      State ExitCode ",
        "------------ ---------- ---------- ---------- ---------- ---------- -------- "]


def test_bad_step_is_fatal() -> None:
    out, err, rc = run("sacct", ["-j", "5.foo"], _client())
    assert (out, rc) == ("", 1) and err.strip() == "sacct: fatal: Bad step specified: 5"


# ---- usage fields ------------------------------------------------------------------------

USAGE = ("JobID,TotalCPU,MaxRSS,MaxRSSNode,MaxRSSTask,AveRSS,AveCPU,MinCPU,MinCPUNode,"
         "MinCPUTask")


def test_step_rows_show_the_recorded_usage() -> None:
    lines, _, _ = _sacct("-P", "-n", "-o", USAGE, "-j", "5")
    assert lines == [
        "5|00:00.750||||||||",  # the allocation line: Slurm has no per-task figures
        "5.batch|00:00.750|1.50M|n1|0|1.50M|00:00:00|00:00:00|n1|0",  # the job's own
        "5.0|00:03.750|2M|n2|1|1641K|00:00:01|00:00:01|n1|0",
        "5.1|00:03.500|3M|n1|||00:00:01|||",  # n1 ran two tasks: per-task figures unknown
        "5.2|00:00:00||||||||",  # not measured
    ]
    lines, _, _ = _sacct("-P", "-n", "-o", "JobID,TotalCPU,MaxRSS,AveRSS", "-j", "8_2.1")
    assert lines == ["8_2.1|00:00:00|512K|512K"]


def test_memory_units_follow_units_and_noconvert() -> None:
    lines, _, _ = _sacct("-P", "-n", "-o", "MaxRSS", "-j", "5.0", "--units=K")
    assert lines == ["2048K"]
    lines, _, _ = _sacct("-P", "-n", "-o", "MaxRSS", "-j", "5.batch", "--units=g")
    assert lines == ["0.00G"]
    lines, _, _ = _sacct("-P", "-n", "-o", "MaxRSS", "-j", "5.0", "--noconvert")
    assert lines == [str(2 * 1024 * 1024)]
    out, err, rc = run("sacct", ["-j", "5", "--units=x"], _client())
    assert rc == 1 and err.splitlines() == [
        "sacct: error: Invalid unit type 'x'. Possible options are 'KMGTP'",
        "sacct: fatal: Invalid unit type"]


def test_slurm_number_and_time_formats() -> None:
    # convert_num_unit with CONVERT_NUM_UNIT_EXACT (bytes in, as sacct passes MaxRSS)
    assert [sf.convert_num_unit(kb * 1024, 0) for kb in (0, 1234, 1024, 1536, 1025, 4 << 20)
            ] == ["0", "1234K", "1M", "1.50M", "1025K", "4G"]
    # _elapsed_time: milliseconds only under an hour, cut not rounded
    assert [sf.cpu_time_text(s) for s in (0, 1.234, 59.9999, 61, 3725.5, 90061)] == [
        "00:00:00", "00:01.234", "00:59.999", "00:01:01", "01:02:05", "1-01:01:01"]
    assert sf.cpu_time_text(1.9, subsec=False) == "00:00:01"


def test_sacct_field_widths_are_capped_and_ascii() -> None:
    """``--format=JobID%99999999`` must not build a huge answer (issue 11): widths are
    capped at 1024 either way; a width of non-ASCII digits is refused."""
    from corral.shims.sacct_fields import FieldError, parse_fields

    assert [c.width for c in parse_fields("JobID%99999999,State%-99999999,NodeList%5")] \
        == [1024, -1024, 5]
    for bad in ("JobID%\u00b9", "JobID%\u0661", "JobID%x"):
        with pytest.raises(FieldError):
            parse_fields(bad)
