"""``squeue -s``/``--steps[=LIST]``: the running steps of running jobs, as Slurm 22.05 lists them.

Rows: a started batch job's ``<id>.batch`` step (named ``batch``, on the first node, one
task) and every ``srun`` step the controller recorded for the job's current run that has
not ended, ``<id>.<n>``. ``LIST`` narrows to ``JOB.STEP`` entries (``12.0``, ``12.batch``,
``7_3.1``); a bare ``JOB`` (no ``.STEP``) takes all of that job's steps. The job filters
(``-u``, ``-p``, ``-j``, ``-w``) still apply to the jobs the steps belong to. Default
format ``%.15i %.8j %.9P %.8u %.9M %N``, sorted by partition, then job id, then step
(``batch`` before numbered steps), as Slurm's default step sort ``P,i`` comes out.

Step format letters: ``%i`` step id, ``%j`` step name, ``%P`` partition, ``%u``/``%U``
user name/uid, ``%M`` time used, ``%l`` time limit (the job's), ``%S`` start time, ``%N``
nodes, ``%A`` task count, ``%C`` CPUs, ``%a`` account, ``%T`` state; any other letter is
printed as written (squeue prints unknown specifiers literally).
"""

from __future__ import annotations

from corral.core.parse.timefmt import format_squeue_time_s
from corral.shims import slurmfmt as sf
from corral.shims.ids import IdError, JobRef, parse_job_refs, ref_matches
from corral.shims.squeue_fields import Getter, Record

STEP_FORMAT = "%.15i %.8j %.9P %.8u %.9M %N"
NAMED_STEPS = ("batch", "extern", "interactive")


def _used(rec: Record, now: float) -> str:
    start = rec.get("start_time")
    return format_squeue_time_s(max(0, int(now - float(start))) if start else 0)


def _limit(rec: Record, now: float) -> str:
    limit = rec["job"].get("time_limit_s")
    return format_squeue_time_s(None if limit is None else int(limit))


def _job(key: str, empty: str = "") -> Getter:
    def get(rec: Record, now: float) -> str:
        value = rec["job"].get(key)
        return empty if value in (None, "") else str(value)
    return get


STEP_FIELDS: dict[str, tuple[str, Getter]] = {
    "a": ("ACCOUNT", _job("account", "(null)")),
    "A": ("TASKS", lambda r, n: str(int(r.get("ntasks") or 1))),
    "C": ("CPUS", lambda r, n: str(int(r.get("num_cpus") or r["job"].get("num_cpus") or 1))),
    "i": ("STEPID", lambda r, n: str(r["step_label"])),
    "j": ("NAME", lambda r, n: str(r.get("name") or "")),
    "l": ("TIME_LIMIT", _limit),
    "M": ("TIME", _used),
    "N": ("NODELIST", lambda r, n: sf.nodelist({"nodes": r.get("nodes") or []})),
    "P": ("PARTITION", _job("partition")),
    "S": ("START_TIME", lambda r, n: sf.iso(r.get("start_time"))),
    "T": ("STATE", lambda r, n: "RUNNING"),
    "u": ("USER", lambda r, n: sf.user_of(r["job"])),
    "U": ("UID", lambda r, n: str(int(r["job"].get("uid") or 0))),
}


def parse_step_list(words: list[str]) -> list[JobRef]:
    """``12.0,12.batch,7_3`` -> job refs; ``ref.step`` None takes all of the job's steps.
    Raises ``IdError`` naming the bad word."""
    refs = parse_job_refs(words)
    for ref in refs:
        step = ref.step
        if step is not None and not ((step.isascii() and step.isdigit() and len(step) <= 10)
                                     or step in NAMED_STEPS):
            raise IdError(ref.word)
    return refs


def step_rows(jobs: list[Record], wanted: list[JobRef] | None) -> list[Record]:
    """The running steps of ``jobs`` (records carrying ``steps``), narrowed by ``wanted``."""
    rows: list[Record] = []
    for job in jobs:
        if sf.job_state(job) not in ("RUNNING", "COMPLETING"):
            continue
        candidates: list[Record] = []
        batch = sf.batch_step(job)
        if batch is not None:
            candidates.append({**batch, "job": job, "step_label": f"{sf.shown_id(job)}.batch",
                               "step_key": -1, "step": "batch"})
        for st in job.get("steps") or []:
            if st.get("end_time") is not None or st.get("state") not in (None, "RUNNING"):
                continue
            sid = int(st.get("step_id", st.get("id", 0)))
            candidates.append({**st, "job": job, "step_label": f"{sf.shown_id(job)}.{sid}",
                               "step_key": sid, "step": str(sid)})
        for row in candidates:
            if wanted is None or any(
                    ref_matches(ref, job) and ref.step in (None, row["step"])
                    for ref in wanted):
                rows.append(row)
    rows.sort(key=lambda r: (str(r["job"].get("partition") or ""), int(r["job"]["id"]),
                             r["step_key"]))
    return rows
