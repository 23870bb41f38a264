"""Small snapshot builders for the priority tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from corral.core.model import (
    Account,
    AccountTree,
    Association,
    Job,
    JobSpec,
    Node,
    NodeSpec,
    Partition,
    Qos,
)
from corral.core.snapshot import ClusterSnapshot


def nodes(n: int = 10, cores: int = 8) -> tuple[Node, ...]:
    return tuple(Node(NodeSpec(f"n{i:02d}", sockets=1, cores_per_socket=cores)) for i in range(n))


def snapshot(
    pending: Iterable[Job] = (),
    *,
    accounts: Iterable[Account] = (),
    assocs: Iterable[Association] = (),
    usage: Mapping[tuple[str, str], float] | None = None,
    partitions: Iterable[Partition] | None = None,
    qos: Iterable[Qos] = (),
    n_nodes: int = 10,
    cores: int = 8,
    running: Iterable[Job] = (),
) -> ClusterSnapshot:
    ns = nodes(n_nodes, cores)
    parts = tuple(partitions) if partitions is not None else (
        Partition("batch", tuple(n.name for n in ns), is_default=True),
    )
    return ClusterSnapshot(
        nodes=ns,
        partitions=parts,
        qos=tuple(qos),
        accounts=AccountTree(tuple(accounts), tuple(assocs)),
        pending=tuple(pending),
        running=tuple(running),
        usage=dict(usage or {}),
    )


def job(job_id: int, submit: float = 0.0, **spec: object) -> Job:
    extra = {k: spec.pop(k) for k in list(spec) if k in _JOB_FIELDS}
    return Job(job_id, JobSpec(**spec), submit_time=submit, **extra)  # type: ignore[arg-type]


_JOB_FIELDS = {"hold", "admin_priority", "site_factor", "eligible_time", "time_limit_s",
               "array_job_id", "array_task_id", "state", "start_time", "end_time", "allocation"}
