"""A submit repeated with its idempotency key answers the first one's jobs (SQLite)."""

from __future__ import annotations

import pytest

from corral.client import CorralError
from tests.e2e.cluster import Cluster


def test_a_retried_submit_makes_no_second_job(cluster: Cluster) -> None:
    body = cluster.submission("true").to_json()
    first = cluster.client.request("POST", "/jobs", body, idempotency_key="retry-1")
    again = cluster.client.request("POST", "/jobs", body, idempotency_key="retry-1")
    assert again == first
    other = cluster.client.request("POST", "/jobs", body, idempotency_key="retry-2")
    assert other["job_ids"][0] > first["job_ids"][0]
    plain = cluster.client.submit(cluster.submission("true"))  # one controller: no key
    assert plain[0] > other["job_ids"][0]
    with pytest.raises(CorralError) as err:
        cluster.client.request("POST", "/jobs", body, idempotency_key="x" * 200)
    assert err.value.status == 400 and "idempotency key" in err.value.message


def test_the_key_survives_a_controller_restart(fresh_cluster: Cluster) -> None:
    c = fresh_cluster
    body = c.submission("true").to_json()
    first = c.client.request("POST", "/jobs", body, idempotency_key="before-crash")
    pid = c.controller_pid()
    assert pid is not None
    c.client.close()
    c.kill9(pid)
    c.start_controller()
    again = c.client.request("POST", "/jobs", body, idempotency_key="before-crash")
    assert again == first


def test_a_retried_sbatch_makes_no_second_job(cluster: Cluster, monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: object) -> None:
    """The launcher's request repeated with its key (what it does after a failover)."""
    from corral.shims import lean

    monkeypatch.setenv("CORRAL_SOCKET", str(cluster.sock))
    monkeypatch.delenv("CORRAL_URL", raising=False)
    body = lean.encode_json({"v": 1, "cmd": "sbatch", "argv": ["--parsable", "--wrap=true",
                                                                "-o", "/dev/null"],
                             "cwd": str(cluster.work), "env": {"PATH": "/usr/bin:/bin"},
                             "files": {}, "stdin": None}).encode()
    answers = []
    for key in ("sb-1", "sb-1", "sb-2"):
        status, payload = lean.http_request("POST", lean.API + "/shim/exec", body, key=key)
        assert status == 200
        rc, out, err, _need = lean.decode_frame(payload)
        assert rc == 0, err
        answers.append(int(out.decode().strip()))
    assert answers[0] == answers[1] and answers[2] > answers[1]
