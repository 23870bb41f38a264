"""Reports, "why pending", Prometheus and the Grafana dashboard against a running cluster.

One real cluster (``corral up --detach``: controller serving HTTP, agent serving metrics)
runs real jobs: one burns a second of CPU, one touches 80 MB, one runs on all 16 configured
CPUs while another waits for them and a third is held.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from corral.sim.swf import read_swf
from tests.e2e.cluster import corral, wait_for
from tests.ops.live import PROMETHEUS, OpsCluster, Prometheus, http_get, ops_cluster

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "corral-dashboard.json"
BURN = f"{sys.executable} -c 'import time\nwhile time.process_time() < 1.0: pass'"
MEM = (f"{sys.executable} -c 'b = bytearray(80 * 1024 * 1024)\n"
       "for i in range(0, len(b), 4096): b[i] = 1'")


class Jobs:
    burn: int
    mem: int
    long: int
    waiting: int
    held: int


@pytest.fixture(scope="module")
def live() -> Iterator[tuple[OpsCluster, Jobs]]:
    with ops_cluster() as c:
        j = Jobs()
        j.burn = c.submit(BURN, account="physics", mem_per_node_mb=100)
        j.mem = c.submit(MEM, account="chem", mem_per_node_mb=200)
        c.wait_state(j.burn, "COMPLETED", 120)  # generous: a loaded 2-core machine
        c.wait_state(j.mem, "COMPLETED", 120)
        j.long = c.submit("sleep 120", account="physics", cpus_per_task=16, name="long")
        c.wait_state(j.long, "RUNNING", 60)
        j.waiting = c.submit("true", account="chem", cpus_per_task=16, name="waiting")
        j.held = c.submit("true", account="chem", hold=True, name="held")
        wait_for(lambda: c.job(j.waiting)["reason"] not in ("None", ""), 60,
                 what="a pending reason")
        yield c, j
        c.client.cancel([j.long, j.waiting, j.held])


def report(c: OpsCluster, *args: str) -> Any:
    r = corral("report", *args, env=c.env())
    assert r.returncode == 0, f"corral report {' '.join(args)}: {r.stdout}\n{r.stderr}"
    return json.loads(r.stdout) if "--json" in args else r.stdout


def test_efficiency_of_real_jobs(live: tuple[OpsCluster, Jobs]) -> None:
    c, j = live
    burn = report(c, "efficiency", str(j.burn), "--json")["efficiency"]
    assert burn["cpu_time_s"] >= 1.0, burn  # measured by the agent, persisted by the controller
    assert 0.2 < burn["cpu_efficiency"] <= 1.1, burn
    mem = report(c, "efficiency", str(j.mem), "--json")["efficiency"]
    assert mem["req_mem_mb"] == 200 and mem["max_rss_mb"] >= 80, mem
    assert 0.4 <= mem["mem_efficiency"] <= 1.0, mem
    text = report(c, "efficiency", str(j.burn))
    assert f"Job ID: {j.burn}" in text and "CPU Efficiency: " in text
    r = corral("report", "efficiency", "999999", env=c.env())
    assert r.returncode == 1 and "Invalid job id" in r.stderr


def test_usage_utilization_top_and_swf(live: tuple[OpsCluster, Jobs], tmp_path: Path) -> None:
    c, j = live
    rows = {r["name"]: r for r in report(c, "usage", "--by", "account", "--json")["rows"]}
    assert set(rows) >= {"physics", "chem"} and rows["physics"]["cpu_hours"] > 0
    csv_text = report(c, "usage", "--by", "user", "--csv", "-S", "1h")
    assert csv_text.splitlines()[0].startswith("user,jobs,cpu_hours")
    assert csv_text.splitlines()[1].startswith("root,")
    png = tmp_path / "util.png"
    u = report(c, "utilization", "--json", "-S", "10m", "--bins", "10", "--plot", str(png))
    assert u["utilization"]["jobs_started"] >= 3 and u["utilization"]["total_cpus"] == 16
    assert u["utilization"]["cpu_utilization"] > 0 and len(u["series"]) == 10
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    top = report(c, "top", "-n", "1", "--json")
    assert [r["name"] for r in top["rows"]] == ["root"]
    out = tmp_path / "history.swf"
    corral_out = corral("report", "swf", str(out), env=c.env())
    assert corral_out.returncode == 0, corral_out.stderr
    tr = read_swf(out)
    ids = tr.column("job_id").tolist()
    assert j.burn in ids and j.mem in ids and j.long not in ids  # finished jobs only
    row = tr.data[ids.index(j.burn)]
    assert row[3] > 0 and row[5] >= 1.0  # run time, CPU time per processor
    # the same through `corral history --swf`, then replayed by the simulator
    out2 = tmp_path / "history2.swf.gz"
    h = corral("history", "--all-users", "--swf", str(out2), env=c.env())
    assert h.returncode == 0 and "finished jobs" in h.stderr, h.stderr
    assert sorted(read_swf(out2).column("job_id").tolist()) == sorted(ids)
    metrics = tmp_path / "replay.json"
    sim = corral("sim", "run", str(out2), "--policy", "fcfs+easy", "--json", str(metrics),
                 env=c.env())
    assert sim.returncode == 0, sim.stderr
    import json

    assert json.loads(metrics.read_text())["jobs"]["completed"] == len(ids)
    fs = {(r["account"], r["user"]): r for r in report(c, "fairshare", "--json")["rows"]}
    assert fs[("physics", "")]["raw_usage"] > 0
    bad = corral("report", "usage", "--since", "yesterday-ish", env=c.env())
    assert bad.returncode == 1 and "cannot read the time" in bad.stderr


def test_why_pending_on_the_live_queue(live: tuple[OpsCluster, Jobs]) -> None:
    c, j = live
    why = c.client.request("GET", f"/ops/why/{j.waiting}")
    text = "\n".join(why["lines"])
    assert why["job"]["reason"] in ("Resources", "Priority"), why["job"]
    assert f"Job {j.waiting} is pending ({why['job']['reason']})" in text
    assert why["factors"] is not None and "Priority: " in text
    assert "Place in queue: " in text
    held = c.client.request("GET", f"/ops/why/{j.held}")
    assert "held by its owner" in held["lines"][0]
    running = c.client.request("GET", f"/ops/why/{j.long}")
    assert "is not pending: it is RUNNING" in running["lines"][0]


def exported_names(text: str) -> set[str]:
    """Every series name an exposition can carry (families even without samples)."""
    out: set[str] = set()
    for fam in text_string_to_metric_families(text):
        out.add(fam.name)
        if fam.type == "counter":
            out.add(fam.name + "_total")
        elif fam.type == "histogram":
            out.update(fam.name + s for s in ("_bucket", "_sum", "_count"))
        out.update(s.name for s in fam.samples)
    return out


def dashboard_queries() -> list[str]:
    data = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in data["panels"] for t in p.get("targets", ())]
    exprs += [v["query"]["query"] for v in data["templating"]["list"]
              if isinstance(v.get("query"), dict)]
    assert len(exprs) > 20
    return exprs


def instantiate(expr: str) -> str:
    return expr.replace("$__rate_interval", "1m").replace("$partition", ".*") \
        .replace("$node", ".*")


def test_grafana_dashboard_names_only_exported_metrics(live: tuple[OpsCluster, Jobs]) -> None:
    c, _j = live
    names = exported_names(http_get(c.url + "/metrics").decode())
    names |= exported_names(http_get(c.agent_url + "/metrics").decode())
    used = {m for e in dashboard_queries() for m in re.findall(r"\bcorral_[a-z0-9_]+", e)}
    assert used and used <= names, f"not exported: {sorted(used - names)}"
    # no job id label on the controller
    ctl = http_get(c.url + "/metrics").decode()
    assert "job_id=" not in ctl


@pytest.mark.skipif(PROMETHEUS is None, reason="the prometheus binary is not installed "
                    "(Debian package prometheus; scripts/system-deps installs it)")
def test_prometheus_scrapes_controller_and_agent(live: tuple[OpsCluster, Jobs]) -> None:
    c, j = live
    root = Path(tempfile.mkdtemp(prefix="corral-prom-"))
    prom = Prometheus(root, {"corral-controller": [f"127.0.0.1:{c.http_port}"],
                             "corral-agents": [f"127.0.0.1:{c.agent_port}"]})
    try:
        prom.wait_ready()

        def targets_up() -> Any:
            act = prom.api("targets")["data"]["activeTargets"]
            health = {t["labels"]["job"]: t["health"] for t in act}
            return health if health == {"corral-controller": "up",
                                        "corral-agents": "up"} else None

        wait_for(targets_up, 30, 0.2, what="both targets up")

        def value(q: str) -> float | None:
            res = prom.api("query", query=q)["data"]["result"]
            return float(res[0]["value"][1]) if res else None

        checks = {
            'sum(corral_jobs_active{state="RUNNING"})': lambda v: v >= 1,
            'sum(corral_jobs_pending{reason=~"Resources|Priority|JobHeldUser"})':
                lambda v: v >= 2,
            "sum(corral_job_wait_seconds_count)": lambda v: v >= 3,
            'corral_account_fairshare{account="physics"}': lambda v: 0 < v < 1,
            f'corral_job_cpus_allocated{{job_id="{j.long}"}}': lambda v: v == 16,
            'corral_node_cpus{node="testnode"}': lambda v: v >= 1,
            'sum(corral_partition_cpus{status="allocated"})': lambda v: v == 16,
        }
        for q, ok in checks.items():
            wait_for(lambda q=q, ok=ok: (lambda v: v is not None and ok(v))(value(q)), 20, 0.2,
                     what=f"{q} in Prometheus")
        # every dashboard query parses and evaluates in the real Prometheus
        for expr in dashboard_queries():
            if expr.startswith("label_values("):
                metric = expr[len("label_values("):].split(",")[0]
                res = prom.api("series", **{"match[]": metric})
            else:
                res = prom.api("query", query=instantiate(expr))
            assert res["status"] == "success", f"{expr}: {res}"
    finally:
        prom.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_web_routes_over_http(live: tuple[OpsCluster, Jobs]) -> None:
    import urllib.error
    import urllib.request

    c, j = live
    token = c.client.token()

    def call(method: str, path: str, body: bytes | None = None,
             auth: bool = True) -> tuple[int, dict[str, str], bytes]:
        req = urllib.request.Request(c.url + path, data=body, method=method)
        if auth:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    status, headers, page = call("GET", "/ui/", auth=False)
    assert status == 200 and b'<script src="/ui/static/app.js"' in page
    assert "script-src 'self'" in headers["content-security-policy"]
    assert call("GET", "/ui/static/app.js", auth=False)[0] == 200
    assert call("GET", "/ui/static/../../corral.db", auth=False)[0] == 404
    assert call("GET", "/ui/static/secret.txt", auth=False)[0] == 404
    status, _h, body = call("GET", "/api/v1/ops/fairshare", auth=False)
    assert status == 401 and b"authentication required" in body
    status, _h, body = call("POST", "/api/v1/ops/submit",
                            json.dumps({"script": "echo no shebang\n"}).encode())
    assert status == 400 and b"This does not look like a batch script" in body
    status, _h, body = call("POST", "/api/v1/ops/submit",
                            json.dumps({"script": "#!/bin/sh\ntrue\n", "time": "soon"}).encode())
    assert status == 400 and b"--time" in body
    status, _h, body = call("POST", "/api/v1/ops/submit", b"{not json")
    assert status == 400 and b"not valid JSON" in body
    status, _h, body = call("GET", "/api/v1/ops/utilization?hours=0")
    assert status == 400 and b"hours must be" in body
    form = {"script": "#!/bin/sh\n#SBATCH -J webform\ntrue\n", "workdir": str(c.work),
            "account": "chem", "mem": "50M"}
    status, _h, body = call("POST", "/api/v1/ops/submit", json.dumps(form).encode())
    assert status == 200, body
    jid = json.loads(body)["job_ids"][0]
    rec = c.job(jid)  # it waits behind the job holding every CPU
    assert rec["name"] == "webform" and rec["account"] == "chem" and rec["user"] == "root"
    assert rec["mem_per_node_mb"] == 50 and rec["dialect"] == "slurm"
    assert rec["state"] == "PENDING"
    c.client.cancel([jid])
