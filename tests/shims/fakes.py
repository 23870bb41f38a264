"""An in-memory stand-in for the controller client, for the shims' pure unit tests.

It implements the ``corral.shims.context.Client`` methods over a list of job records
built with ``job(...)`` (the record shape documented in ``corral.client``). End-to-end
tests use the real controller; these only pin the renderers and option handling.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from corral.client import CorralError

CAPTURED = Path("/work/shared/compat/slurm-22.05")


def job(id: int, **kw: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "id": id, "job_id": str(id), "array_job_id": None, "array_task_id": None,
        "array_task_str": None, "array_max_running": None, "name": "job", "user": "root",
        "uid": 0, "gid": 0, "account": None, "qos": None, "partition": "debug",
        "partitions": [], "state": "PENDING", "reason": "Priority", "priority": 1.0,
        "hold": "NONE", "submit_time": 1000.0, "eligible_time": 1000.0, "start_time": None,
        "end_time": None, "begin_time": None, "time_limit_s": None, "time_used_s": 0.0,
        "nodes": [], "nodelist": "", "num_nodes": 1, "num_cpus": 1, "num_tasks": 1,
        "cpus_per_task": 1, "mem_per_node_mb": None, "mem_per_cpu_mb": 100,
        "alloc_mem_mb": 0, "gpus": 0, "tres": "cpu=1,mem=100M,node=1,billing=1",
        "exit_code": None, "signal": 0, "derived_exit": "0:0", "restarts": 0,
        "requeue": True, "workdir": "/var/tmp/slurm-anchor/work/capture", "stdout": "",
        "stderr": "", "command": "", "dependency": "", "submit_host": "vm", "comment": "",
        "constraint": "", "exclusive": False, "end_reason": "", "cpu_time_s": 0.0,
        "max_rss_mb": 0.0, "dialect": "slurm", "est_start": None, "nice": 0,
    }
    if "task" in kw:
        aj = kw.pop("array")
        rec["array_job_id"] = aj
        rec["array_task_id"] = kw.pop("task")
        rec["job_id"] = f"{aj}_{rec['array_task_id']}"
    rec.update(kw)
    if rec["state"] != "PENDING" and rec["reason"] == "Priority":
        rec["reason"] = "None"
    if rec["nodes"] and not rec["nodelist"]:
        rec["nodelist"] = ",".join(rec["nodes"])
    return rec


class FakeClient:
    def __init__(self, records: Iterable[dict[str, Any]] = (),
                 nodes: Iterable[dict[str, Any]] = (),
                 partitions: Iterable[dict[str, Any]] = ()) -> None:
        self.records = list(records)
        self.node_records = list(nodes)
        self.partition_records = list(partitions)
        self.calls: list[tuple[str, Any]] = []
        self.submitted: list[dict[str, Any]] = []
        self.next_id = 100

    def submit_result(self, sub: Mapping[str, Any]) -> dict[str, Any]:
        self.submitted.append(dict(sub))
        jid = self.next_id
        self.next_id += 1
        return {"job_ids": [jid], "array_job_id": None, "display_id": str(jid)}

    def jobs(self, user: str | None = None, states: Iterable[str] | None = None,
             partition: str | None = None, ids: Iterable[int | str] | None = None, *,
             account: str | None = None, name: str | None = None,
             include_finished: bool = False,
             fields: Iterable[str] | None = None) -> list[dict[str, Any]]:
        self.calls.append(("jobs", include_finished))
        return [dict(r) for r in self.records]

    def job(self, job_id: int | str) -> dict[str, Any]:
        for r in self.records:
            if str(r["id"]) == str(job_id) or r["job_id"] == str(job_id):
                return dict(r)
        raise CorralError("not_found", f"no job {job_id}", 404)

    def _results(self, action: str, ids: Iterable[int | str]) -> list[dict[str, Any]]:
        out = []
        for i in ids:
            self.calls.append((action, str(i)))
            known = any(str(r["id"]) == str(i) or r["job_id"] == str(i) for r in self.records)
            out.append({"id": str(i), "ok": known, "code": "" if known else "not_found",
                        "message": "" if known else f"no job {i}"})
        return out

    def cancel(self, ids: Iterable[int | str], signal: str | int | None = None, *,
               batch_only: bool = False, scope: str | None = None) -> list[dict[str, Any]]:
        return self._results("cancel", ids)

    def hold(self, ids: Iterable[int | str], *, admin: bool = False) -> list[dict[str, Any]]:
        return self._results("hold", ids)

    def release(self, ids: Iterable[int | str]) -> list[dict[str, Any]]:
        return self._results("release", ids)

    def requeue(self, ids: Iterable[int | str], *, hold: bool = False) -> list[dict[str, Any]]:
        return self._results("requeue", ids)

    def update_job(self, job_id: int | str, **fields: Any) -> dict[str, Any]:
        self.calls.append(("update", (job_id, fields)))
        return self.job(job_id)

    def history(self, user: str | None = None, *, since: float | None = None,
                until: float | None = None, states: Iterable[str] | None = None,
                ids: Iterable[int | str] | None = None, account: str | None = None,
                partition: str | None = None, limit: int | None = None,
                all_users: bool = False,
                names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        self.calls.append(("history", (since, until, list(ids or []))))
        wanted = set(names) if names is not None else None
        return [dict(r) for r in self.records if wanted is None or r.get("name") in wanted]

    def nodes(self) -> list[dict[str, Any]]:
        return [dict(n) for n in self.node_records]

    def partitions(self) -> list[dict[str, Any]]:
        return [dict(p) for p in self.partition_records]

    def cluster_config(self) -> dict[str, Any]:
        return {"cluster_name": "corral"}

    def drain(self, node: str, reason: str) -> dict[str, Any]:
        return {"name": node}

    def resume(self, node: str) -> dict[str, Any]:
        return {"name": node}

    def whoami(self) -> dict[str, Any]:
        return {"user": "root", "uid": 0, "gid": 0, "operator": True, "via": "socket"}

    def ping(self) -> dict[str, Any]:
        return {"status": "ok", "cluster": "corral", "version": "0.1.0"}


def captured(name: str) -> tuple[list[str], str, int]:
    """(argv after the command name, stdout+stderr, exit code) of a captured file."""
    text = (CAPTURED / name).read_text()
    first, _, rest = text.partition("\n")
    assert first.startswith("$ ")
    body, _, tail = rest.rpartition("[exit code: ")
    rc = int(tail.split("]")[0])
    argv = shlex.split(first[2:])
    return argv[1:], body, rc
