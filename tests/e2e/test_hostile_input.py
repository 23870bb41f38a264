"""Hostile input on a real cluster (issue 11): malformed identifiers and wrong-typed bodies
get a 4xx naming what was wrong, never a 500, and a wrong-typed submission is never
accepted (it would stall every scheduling cycle)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from corral.client import CorralError
from tests.e2e.cluster import Cluster

BIG = 2 ** 70


def _status(cluster: Cluster, method: str, path: str, body: Any = None) -> tuple[int, str]:
    try:
        cluster.client.request(method, path, body)
    except CorralError as exc:
        return exc.status or 0, exc.message
    return 200, ""


BAD_IDS = ["\u00b9", "\u2460", "1\u00b2", "\u0661\u0662", str(BIG), "-1", "1_\u00b9",
           f"1_{BIG}", "1_[0-4000000000]", "1_[\u00b9-3]"]


@pytest.mark.parametrize("ref", BAD_IDS)
def test_malformed_job_ids_are_4xx(cluster: Cluster, ref: str) -> None:
    for method, path, body in [
        ("GET", f"/jobs/{quote(ref)}", None),
        ("GET", f"/jobs?id={quote(ref)}", None),
        ("PATCH", f"/jobs/{quote(ref)}", {"comment": "x"}),
        ("POST", "/jobs/query", {"ids": [ref]}),
        ("POST", "/history", {"ids": [ref]}),
        ("POST", f"/jobs/{quote(ref)}/steps/0/end", {"exit_code": 0}),
    ]:
        status, msg = _status(cluster, method, path, body)
        assert 400 <= status < 500, (method, path, status, msg)
    res = cluster.client.request("POST", "/jobs/cancel", {"ids": [ref]})["results"]
    assert res[0]["ok"] is False and res[0]["code"] in ("invalid", "not_found"), res


BAD_BODIES: list[tuple[str, str, Any, str]] = [
    ("POST", "/jobs/query", {"ids": "12"}, "ids"),
    ("POST", "/jobs/query", {"ids": [BIG]}, "ids"),
    ("POST", "/jobs/query", {"ids": [{"a": 1}]}, "ids"),
    ("POST", "/jobs/query", {"states": "RUNNING"}, "states"),
    ("POST", "/jobs/query", {"fields": 3}, "fields"),
    ("POST", "/jobs/query", {"user": 0}, "user"),
    ("POST", "/jobs/query", [1, 2], "object"),
    ("POST", "/jobs/cancel", {"ids": [None]}, "ids"),
    ("POST", "/jobs/cancel", {"ids": [True]}, "ids"),
    ("POST", "/jobs/cancel", {"ids": ["1"], "signal": [9]}, "signal"),
    ("POST", "/jobs/cancel", {}, "ids"),
    ("POST", "/jobs/hold", "12", "object"),
    ("POST", "/history", {"since": "yesterday"}, "since"),
    ("POST", "/history", {"limit": "10"}, "limit"),
    ("POST", "/history", {"limit": -1}, "limit"),
    ("POST", "/history", {"limit": BIG}, "limit"),
    ("POST", "/history", {"states": [1]}, "states"),
    ("POST", "/history", {"ids": [BIG]}, "ids"),
    ("POST", "/tokens", {"user": 5}, "user"),
    ("POST", "/tokens", [], "object"),
    ("PATCH", "/jobs/1", {"nice": BIG}, "nice"),
    ("PATCH", "/jobs/1", {"partitions": [1]}, "partitions"),
    ("PATCH", "/jobs/1", {"begin_time": True}, "begin_time"),
]


@pytest.mark.parametrize(("method", "path", "body", "field"), BAD_BODIES)
def test_wrong_json_types_are_400_naming_the_field(cluster: Cluster, method: str, path: str,
                                                    body: Any, field: str) -> None:
    if method == "PATCH":  # a pending job to update
        jid = cluster.submit("true", hold=True)
        path = f"/jobs/{jid}"
    status, msg = _status(cluster, method, path, body)
    assert status == 400, (method, path, body, status, msg)
    assert field in msg, msg


def _good(cluster: Cluster) -> dict[str, Any]:
    return cluster.submission("true").to_json()


WRONG_SUBMISSIONS: list[tuple[str, Any, str]] = [
    ("spec.begin_time", "tomorrow", "spec.begin_time"),
    ("env", ["A=1"], "env"),
    ("env", {"A": 1}, "env.A"),
    ("argv", "true", "argv"),
    ("spec.uid", BIG, "spec.uid"),
    ("spec.nodes_min", "2", "spec.nodes_min"),
    ("spec.gres", [["gpu", "x"]], "spec.gres[0][1]"),
    ("spec.partitions", "debug", "spec.partitions"),
    ("spec.exclusive", "yes", "spec.exclusive"),
    ("spec.time_limit_s", 1.5, "spec.time_limit_s"),
    ("spec.dependency", {"items": [{"kind": "sometime"}]}, "spec.dependency.items[0].kind"),
    ("hold", 1, "hold"),
    ("extra", {"submit_host": 7}, "extra.submit_host"),
    ("spec.no_such_field", 1, "spec.no_such_field"),
]


@pytest.mark.parametrize(("key", "value", "field"), WRONG_SUBMISSIONS)
def test_wrong_typed_submission_is_rejected(cluster: Cluster, key: str, value: Any,
                                            field: str) -> None:
    body = _good(cluster)
    head, _, tail = key.partition(".")
    if tail:
        body[head][tail] = value
    else:
        body[head] = value
    status, msg = _status(cluster, "POST", "/jobs", body)
    assert status == 400, (key, value, status, msg)
    assert field in msg, msg
    # and the cluster still schedules: a good job starts and ends
    jid = cluster.submit("true")
    assert cluster.wait_done(jid)["state"] == "COMPLETED"


def test_a_bad_stored_record_is_held_and_others_run(fresh_cluster: Cluster) -> None:
    """A record that the API would refuse (a string begin_time), written straight into
    the store of a stopped cluster: after the restart the core cannot evaluate it; it is
    held with the error as its reason and every other job still starts."""
    import json
    import sqlite3

    c = fresh_cluster
    bad = c.submit("true", hold=True)
    c.down()
    db = sqlite3.connect(c.state_dir / "corral.db")
    (text,) = db.execute("select submission from jobs where id = ?", (bad,)).fetchone()
    sub = json.loads(text)
    sub["spec"]["begin_time"] = "tomorrow"
    sub["env"] = ["not", "a", "dict"]
    data = json.loads(db.execute("select data from jobs where id = ?", (bad,)).fetchone()[0])
    data["hold"] = "NONE"
    data["reason"] = "None"
    db.execute("update jobs set submission = ?, data = ? where id = ?",
               (json.dumps(sub), json.dumps(data), bad))
    db.commit()
    db.close()
    c.up()
    good = c.submit("true")
    assert c.wait_done(good)["state"] == "COMPLETED"
    job = c.wait_state(bad, "PENDING")
    from tests.e2e.cluster import wait_for

    job = wait_for(lambda: (lambda j: j if j["reason"] == "JobHeldAdmin" else None)(c.job(bad)),
                   10, what="the bad job held")
    assert "cannot evaluate" in str(job.get("reason_detail", job)), job
    again = c.submit("true")  # and the cycles after it go on
    assert c.wait_done(again)["state"] == "COMPLETED"
