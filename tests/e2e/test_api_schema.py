"""The API's published contract (issue 11, item 1): ``/openapi.json`` declares the body of
every operation that takes one, and schemathesis, generating requests from that document
against a live controller over loopback TCP, never gets a server error. A request body
past ``[controller] max_request_mb`` is a 413 whatever route it is sent to."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import TEST_CONFIG, Cluster

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Live:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="corral-schema-"))
        self.port = _free_port()
        config = TEST_CONFIG.replace(
            "[controller]\n",
            f'[controller]\nlisten = "127.0.0.1:{self.port}"\nmax_request_mb = 1\n')
        self.cluster = Cluster(self.root, config)
        (self.cluster.state_dir / "log").mkdir(parents=True)
        # no agent: whatever the fuzzer manages to submit stays pending, nothing runs
        self.cluster.start_controller()
        self.token = str(self.cluster.client.request("POST", "/tokens", {})["token"])
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.cluster.down()
        if not os.environ.get("CORRAL_TEST_KEEP"):
            shutil.rmtree(self.root, ignore_errors=True)

    def raw(self, method: str, path: str, body: bytes,
            headers: dict[str, str] | None = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request(method, path, body=body, headers={
                "Authorization": f"Bearer {self.token}", **(headers or {})})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read() or b"null")
        finally:
            conn.close()


_LIVE: Live | None = None


def _live() -> Live:
    global _LIVE
    if _LIVE is None:
        _LIVE = Live()
    return _LIVE


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    global _LIVE
    try:
        yield _live()
    finally:
        if _LIVE is not None:
            _LIVE.close()
            _LIVE = None


@pytest.fixture(scope="module")
def api_schema(live: Live) -> Any:
    return schemathesis.openapi.from_url(f"{live.url}/openapi.json")


BODILESS = {"/api/v1/jobs/{job_id}/allocation/keepalive", "/api/v1/nodes/{name}/resume",
            "/api/v1/config/reload"}


def test_every_body_taking_operation_declares_its_body(live: Live) -> None:
    status, doc = live.raw("GET", "/openapi.json", b"")
    assert status == 200
    schemas = doc["components"]["schemas"]
    missing = []
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if method in ("post", "patch", "put") and path not in BODILESS:
                ref = (op.get("requestBody", {}).get("content", {})
                       .get("application/json", {}).get("schema", {}).get("$ref", ""))
                if not ref.startswith("#/components/schemas/") or \
                        ref.rsplit("/", 1)[1] not in schemas:
                    missing.append(f"{method.upper()} {path}")
    assert not missing, missing
    sub = schemas["JobSubmission"]
    assert sub["properties"]["env"]["type"] == "object"
    assert schemas["JobQuery"]["properties"]["ids"]["anyOf"][0]["maxItems"] == 100_000


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=int(os.environ.get("CORRAL_FUZZ_EXAMPLES", "25")), deadline=None,
          derandomize=not os.environ.get("CORRAL_FUZZ_EXAMPLES"),
          suppress_health_check=list(HealthCheck))
def test_no_generated_request_is_a_server_error(case: Any, live: Live) -> None:
    response = case.call(headers={"Authorization": f"Bearer {live.token}"}, timeout=30)
    case.validate_response(response, checks=[not_a_server_error])


@pytest.mark.parametrize("path", ["/api/v1/jobs", "/api/v1/jobs/query", "/api/v1/tokens",
                                  "/api/v1/shim/exec", "/api/v1/jobs/cancel"])
def test_a_body_past_the_cap_is_413(live: Live, path: str) -> None:
    big = b'{"x":"' + b"a" * (1 << 20) + b'"}'
    status, body = live.raw("POST", path, big, {"Content-Type": "application/json"})
    assert status == 413, body
    assert "max_request_mb" in body["error"]["message"]
    # a chunked body that never declares its size is cut off the same way
    conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=30)
    try:
        conn.putrequest("POST", path)
        conn.putheader("Authorization", f"Bearer {live.token}")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        chunk = b"a" * 65536
        try:
            for _ in range(40):
                conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            conn.send(b"0\r\n\r\n")
        except OSError:
            pass  # the controller answered and closed before the whole body went out
        assert conn.getresponse().status == 413
    finally:
        conn.close()
    # and the controller is fine afterwards
    assert live.raw("GET", "/api/v1/ping", b"")[0] == 200
