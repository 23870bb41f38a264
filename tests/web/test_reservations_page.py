"""The web UI's Reservations page against a running cluster over real HTTP: the page and
its script are served, the list it reads needs the same token as the rest of the UI, and
in a headless Chromium the table shows each reservation's window, nodes, users or
accounts, flags and whether it is active."""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ops.live import OpsCluster, http_get, ops_cluster

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[OpsCluster, str]]:
    with ops_cluster() as c:
        c.client.create_reservation(name="maint", start_time="now", duration_s=3600,
                                    nodes="testnode", users=["root"], flags=["MAINT"])
        c.client.create_reservation(name="later", start_time=time.time() + 86400,
                                    duration_s=7200, node_count=1, accounts=["chem"])
        yield c, c.client.token()


def _get(url: str, token: str | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"}
                                 if token else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_reservations_over_http(cluster: tuple[OpsCluster, str]) -> None:
    c, token = cluster
    page = http_get(f"{c.url}/ui/").decode()
    assert 'href="#/reservations"' in page and 'id="resv-body"' in page
    assert b"async function renderReservations" in http_get(f"{c.url}/ui/static/app.js")
    status, _ = _get(f"{c.url}/api/v1/reservations")
    assert status == 401  # the same token as every other view
    status, _ = _get(f"{c.url}/api/v1/reservations", "not-a-token")
    assert status == 401
    status, data = _get(f"{c.url}/api/v1/reservations", token)
    assert status == 200
    got = {r["name"]: r for r in data["reservations"]}
    assert got["maint"]["state"] == "ACTIVE" and "MAINT" in got["maint"]["flags"]
    assert got["maint"]["users"] == ["root"] and got["maint"]["nodelist"] == "testnode"
    assert got["later"]["state"] == "INACTIVE" and got["later"]["accounts"] == ["chem"]
    assert got["later"]["duration_s"] == 7200


def test_reservations_page_in_chromium(cluster: tuple[OpsCluster, str],
                                       tmp_path: Path) -> None:
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (scripts/system-deps)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    c, token = cluster
    with sync_api.sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            page = ctx.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(f"{c.url}/ui/#token={token}")
            page.wait_for_selector("#view-queue:not([hidden])")
            page.click('a[data-view="reservations"]')
            maint = page.wait_for_selector('tr[data-reservation="maint"]').inner_text()
            cells = maint.split("\t")
            assert cells[0] == "maint" and cells[1] == "ACTIVE", cells
            assert cells[4] == "01:00:00" and cells[5] == "testnode (1)", cells
            assert cells[7:] == ["root", "-", "MAINT,SPEC_NODES"], cells
            later = page.inner_text('tr[data-reservation="later"]').split("\t")
            assert later[1] == "INACTIVE" and later[4] == "02:00:00", later
            assert later[7:] == ["-", "chem", "-"], later
            assert page.inner_text("#resv-summary") == "2 reservation(s), 1 active"
            # a deleted reservation leaves the page at its next refresh (every 2 s)
            c.client.delete_reservation("later")
            page.wait_for_selector('tr[data-reservation="later"]', state="detached")
            assert page.get_attribute('a[data-view="reservations"]', "class") == "active"
            assert not errors, errors
        finally:
            ctx.close()
