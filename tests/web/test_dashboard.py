"""The web dashboard in a real headless Chromium against a running cluster.

Loads the page, signs in with a token, submits a job through the portal form, watches it
appear in the queue and change state, opens a pending job's "why" view, the nodes,
utilization and fair-share pages. Screenshots go to a temporary directory, or to
``docs/img/`` when ``CORRAL_UPDATE_SCREENSHOTS=1`` (how the README's picture is made).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import wait_for
from tests.ops.live import ops_cluster

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian "
                                "packages chromium, chromium-driver; scripts/system-deps)")


def shots_dir(tmp_path: Path) -> Path:
    if os.environ.get("CORRAL_UPDATE_SCREENSHOTS") == "1":
        return REPO / "docs" / "img"
    return tmp_path


def test_dashboard_in_chromium(tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="pip install playwright (uses the system chromium)")
    shots = shots_dir(tmp_path)
    with ops_cluster() as c:
        token = c.client.token()
        done = c.submit("true", account="physics", name="prep", cpus_per_task=2)
        held = c.submit("true", account="chem", hold=True, name="held")
        c.wait_done(done)
        with sync_api.sync_playwright() as pw:
            ctx = pw.chromium.launch_persistent_context(
                str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True,
                args=FLAGS, viewport={"width": 1360, "height": 760})
            try:
                run_browser(ctx.new_page(), c, token, held, shots)
            finally:
                ctx.close()


def state_of(page: Any, jid: str) -> str | None:
    el = page.query_selector(f'tr[data-job-id="{jid}"] [data-state]')
    return None if el is None else str(el.get_attribute("data-state"))


def run_browser(page: Any, c: Any, token: str, held: int, shots: Path) -> None:
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # a bad token is refused and the sign-in form says so
    page.goto(f"{c.url}/ui/#token=not-a-token")
    page.wait_for_selector("#view-login:not([hidden])")
    page.wait_for_selector("#error:not([hidden])")
    assert "invalid token" in page.inner_text("#error")
    # sign in with a real token through the form
    page.fill("#login-token", token)
    page.click("#login-form button")
    page.wait_for_selector("#view-queue:not([hidden])")
    wait_for(lambda: page.inner_text("#whoami").startswith("root"), 10, 0.1, what="whoami")
    page.wait_for_selector(f'tr[data-job-id="{held}"]')  # the queue loads after whoami
    # a pending job that named no partition shows the cluster's default one by name
    held_row = page.inner_text(f'tr[data-job-id="{held}"]')
    assert c.job(held)["partition"] == "main" and "\tmain\t" in held_row, held_row

    # submit through the portal form, as the signed-in user
    page.click('a[data-view="submit"]')
    page.fill("#s-script", "#!/bin/bash\n#SBATCH --job-name=from-web\nsleep 3\necho done\n")
    page.fill("#s-time", "5:00")
    page.fill("#s-account", "chem")
    page.fill("#s-workdir", str(c.work))
    page.click("#s-submit")
    jid = page.wait_for_selector("#submitted-link").inner_text()
    assert c.job(jid)["name"] == "from-web" and c.job(jid)["user"] == "root"

    # it appears in the queue and changes state (polled by the page every 2 s)
    page.click('a[data-view="queue"]')
    page.wait_for_selector(f'tr[data-job-id="{jid}"]')
    seen = [state_of(page, jid)]
    assert seen[0] in ("PENDING", "RUNNING"), seen
    deadline = time.monotonic() + 60
    while seen[-1] != "COMPLETED":
        assert time.monotonic() < deadline, f"states seen: {seen}; {c.job(jid)}"
        page.wait_for_timeout(200)
        s = state_of(page, jid)
        if s != seen[-1]:
            seen.append(s)
    assert len(seen) >= 2, seen

    # a job on all CPUs and one waiting behind it: the queue, then "why pending"
    long = c.submit("sleep 120", account="physics", cpus_per_task=16, name="simulation")
    c.wait_state(long, "RUNNING", 60)
    wait = c.submit("true", account="chem", cpus_per_task=8, name="analysis")
    wait_for(lambda: c.job(wait)["reason"] not in ("None", ""), 60, what="a reason")
    page.fill("#f-user", "root")
    page.wait_for_selector(f'tr[data-job-id="{wait}"]')
    page.wait_for_selector(f'tr[data-job-id="{long}"] [data-state="RUNNING"]')
    page.set_viewport_size({"width": 1360, "height": 420})
    page.screenshot(path=str(shots / "web-dashboard.png"), full_page=True)
    page.set_viewport_size({"width": 1360, "height": 760})

    page.click(f'tr[data-job-id="{wait}"] a')
    page.wait_for_selector("#view-job:not([hidden])")
    wait_for(lambda: f"Job {wait} is pending (" in page.inner_text("#job-why"), 10, 0.1,
             what="the why-pending text")
    why = page.inner_text("#job-why")
    assert "Place in queue:" in why and "Priority:" in why, why
    assert "fairshare" in page.inner_text("#job-factors")
    page.screenshot(path=str(shots / "web-job.png"), full_page=True)

    page.click('a[data-view="nodes"]')
    page.wait_for_selector('tr[data-node="testnode"]')
    wait_for(lambda: "16 / 16" in page.inner_text('tr[data-node="testnode"]'), 10, 0.1,
             what="the node's allocation")

    page.click('a[data-view="utilization"]')
    page.wait_for_selector("#util-chart svg path.area")
    assert "CPU utilization" in page.inner_text("#util-summary")

    page.click('a[data-view="fairshare"]')
    page.wait_for_selector("#fs-body tr")
    assert "physics" in page.inner_text("#fs-body") and "chem" in page.inner_text("#fs-body")
    check_page(page, c)
    c.client.cancel([long, wait, held])
    assert not errors, errors


def check_page(page: Any, c: Any) -> None:
    """The Checks page lists a run kept under the controller's state dir (here written
    directly, as `corral check cluster` and the periodic task write them), its verdict,
    and shows its heat map and report.md through the API with the token."""
    from corral.checks.report import run_record, write_report
    from corral.checks.verdict import Limits, LinkResult, NodeResult, verdicts

    state = Path(c.client.cluster_config()["state_dir"])
    links = [LinkResult("n1", "n2", 5.0, 1000.0), LinkResult("n1", "n3", 6.0, 90.0),
             LinkResult("n2", "n3", 6.0, 95.0)]
    nodes = [NodeResult(n, 10.0) for n in ("n1", "n2", "n3")]
    rec = run_record("20260101-000000-1-001", time.time(), time.time() + 5, nodes, links,
                     verdicts(nodes, links, Limits()), {"nodes": ["n1", "n2", "n3"],
                                                        "checks": ["network", "compute"],
                                                        "trigger": "periodic"})
    write_report(rec, state / "checks" / "reports" / rec["run_id"])
    page.click('a[data-view="checks"]')
    row = page.wait_for_selector(f'tr[data-run="{rec["run_id"]}"]')
    text = row.inner_text()
    assert "periodic" in text and "outliers: n3" in text and "report.md" in text, text
    row.query_selector("a").click()
    page.wait_for_selector("#check-heatmap")
    page.wait_for_selector("#check-report")
    assert "ping-pong bandwidth heat map" in page.inner_text("#check-report")
    assert page.eval_on_selector("#check-heatmap", "e => e.naturalWidth") > 100
    assert "n3: ping-pong bandwidth to every peer" in page.inner_text("#check-detail")
