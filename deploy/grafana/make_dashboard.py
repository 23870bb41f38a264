"""Writes corral-dashboard.json (Grafana >= 9 dashboard for Corral's Prometheus metrics).

Run ``python deploy/grafana/make_dashboard.py`` after changing a panel; the JSON is what
Grafana imports (Dashboards -> New -> Import), and what ``tests/ops`` checks against a live
cluster: every query must evaluate in a real Prometheus and name only exported metrics.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DS = {"type": "prometheus", "uid": "${datasource}"}
P = 'partition=~"$partition"'
N = 'node=~"$node"'
RI = "$__rate_interval"

panels: list[dict[str, Any]] = []
_next_id = [1]


def _pid() -> int:
    _next_id[0] += 1
    return _next_id[0]


def row(title: str, y: int) -> None:
    panels.append({"type": "row", "title": title, "id": _pid(), "collapsed": False,
                   "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})


def panel(kind: str, title: str, targets: list[tuple[str, str]], x: int, y: int, w: int,
          h: int, unit: str = "short", description: str = "", **extra: Any) -> None:
    p: dict[str, Any] = {
        "type": kind, "title": title, "id": _pid(), "datasource": DS,
        "description": description,
        "gridPos": {"h": h, "w": w, "x": x, "y": y},
        "targets": [{"refId": chr(65 + i), "datasource": DS, "expr": expr,
                     "legendFormat": legend, "range": True}
                    for i, (expr, legend) in enumerate(targets)],
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
    }
    if kind == "stat":
        p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value",
                        "graphMode": "area"}
    p.update(extra)
    panels.append(p)


y = 0
row("Cluster", y)
y += 1
panel("stat", "Running jobs", [(f'sum(corral_jobs_active{{state="RUNNING",{P}}})', "")],
      0, y, 4, 4)
panel("stat", "Pending jobs", [(f'sum(corral_jobs_active{{state="PENDING",{P}}})', "")],
      4, y, 4, 4)
panel("stat", "CPUs allocated",
      [('sum(corral_cluster_cpus{status="allocated"}) / sum(corral_cluster_cpus)', "")],
      8, y, 4, 4, unit="percentunit")
panel("stat", "GPUs allocated",
      [('sum(corral_cluster_gpus{status="allocated"}) / sum(corral_cluster_gpus)', "")],
      12, y, 4, 4, unit="percentunit")
panel("stat", "Nodes down or drained",
      [('sum(corral_nodes{state=~"DOWN|DRAINED|DRAINING"})', "")], 16, y, 4, 4)
panel("stat", "Agents connected", [("corral_agents_connected", "")], 20, y, 4, 4)
y += 4
panel("timeseries", "Jobs by state", [(f"sum by (state) (corral_jobs_active{{{P}}})",
                                        "{{state}}")], 0, y, 12, 8)
panel("timeseries", "Pending jobs by reason",
      [(f"sum by (reason) (corral_jobs_pending{{{P}}})", "{{reason}}")], 12, y, 12, 8,
      description="Slurm-style pending reasons (Priority, Resources, Dependency, ...)")
y += 8
row("Utilization (allocated / total, per partition)", y)
y += 1
for i, (metric, title) in enumerate((("corral_partition_cpus", "CPUs"),
                                     ("corral_partition_memory_bytes", "Memory"),
                                     ("corral_partition_gpus", "GPUs"))):
    panel("timeseries", f"{title} allocated",
          [(f'sum by (partition) ({metric}{{status="allocated",{P}}}) / '
            f"sum by (partition) ({metric}{{{P}}})", "{{partition}}")],
          8 * i, y, 8, 8, unit="percentunit")
y += 8
panel("timeseries", "CPUs: allocated, idle, unavailable",
      [(f"sum by (status) (corral_partition_cpus{{{P}}})", "{{status}}")], 0, y, 12, 8,
      description="'other': CPUs of nodes that cannot take jobs (down, drained, agent gone)")
panel("timeseries", "Demand: CPUs asked for by pending jobs",
      [(f"sum by (partition) (corral_pending_cpus{{{P}}})", "{{partition}}")], 12, y, 12, 8)
y += 8
row("Queue", y)
y += 1
panel("timeseries", "Queue wait (submit to start)",
      [(f"histogram_quantile({q}, sum by (le) (rate(corral_job_wait_seconds_bucket{{{P}}}"
        f"[{RI}])))", f"p{int(q * 100)}") for q in (0.5, 0.9, 0.99)],
      0, y, 12, 8, unit="s")
panel("timeseries", "Oldest pending job", [(f"max by (partition) "
                                            f"(corral_pending_oldest_seconds{{{P}}})",
                                            "{{partition}}")], 12, y, 12, 8, unit="s")
y += 8
panel("timeseries", "Throughput (jobs/s)",
      [("sum(rate(corral_jobs_submitted_total[" + RI + "]))", "submitted"),
       (f"sum(rate(corral_partition_jobs_started_total{{{P}}}[{RI}]))", "started"),
       ("sum by (state) (rate(corral_jobs_ended_total[" + RI + "]))", "ended {{state}}")],
      0, y, 12, 8, unit="reqps")
panel("timeseries", "Scheduling cycle",
      [(f"histogram_quantile({q}, sum by (le) (rate(corral_scheduler_cycle_seconds_bucket"
        f"[{RI}])))", f"p{int(q * 100)}") for q in (0.5, 0.99)],
      12, y, 12, 8, unit="s")
y += 8
row("Fair share", y)
y += 1
panel("timeseries", "Fair-share factor by account", [("corral_account_fairshare", "{{account}}")],
      0, y, 12, 8, description="2^(-usage/shares): 1 unused, 0.5 exactly at its share",
      fieldConfig={"defaults": {"unit": "short", "min": 0, "max": 1}, "overrides": []})
panel("timeseries", "Usage against shares",
      [("corral_account_usage_norm", "usage {{account}}"),
       ("corral_account_shares_norm", "share {{account}}")], 12, y, 12, 8,
      unit="percentunit")
y += 8
row("Nodes", y)
y += 1
panel("timeseries", "Node CPU busy",
      [(f'1 - sum by (node) (rate(corral_node_cpu_seconds_total{{mode="idle",{N}}}[{RI}])) / '
        f"sum by (node) (rate(corral_node_cpu_seconds_total{{{N}}}[{RI}]))", "{{node}}")],
      0, y, 8, 8, unit="percentunit")
panel("timeseries", "Node memory in use",
      [(f"1 - corral_node_memory_available_bytes{{{N}}} / "
        f"corral_node_memory_total_bytes{{{N}}}", "{{node}}")], 8, y, 8, 8,
      unit="percentunit")
panel("timeseries", "Node load (1 min) per CPU",
      [(f"corral_node_load1{{{N}}} / corral_node_cpus{{{N}}}", "{{node}}")], 16, y, 8, 8)
y += 8
panel("timeseries", "GPU utilization", [(f"corral_gpu_utilization_ratio{{{N}}}",
                                         "{{node}} gpu{{gpu}} {{type}}")], 0, y, 8, 8,
      unit="percentunit")
panel("timeseries", "GPU memory in use",
      [(f"corral_gpu_memory_used_bytes{{{N}}} / corral_gpu_memory_total_bytes{{{N}}}",
        "{{node}} gpu{{gpu}}")], 8, y, 8, 8, unit="percentunit")
panel("timeseries", "GPU power", [(f"corral_gpu_power_watts{{{N}}}", "{{node}} gpu{{gpu}}")],
      16, y, 8, 8, unit="watt")
y += 8
row("Jobs on the nodes (per-job labels come from the agents only)", y)
y += 1
panel("timeseries", "Job CPU efficiency (CPU time / allocated CPUs)",
      [(f"rate(corral_job_cpu_seconds_total{{{N}}}[{RI}]) / "
        f"corral_job_cpus_allocated{{{N}}}", "job {{job_id}} ({{user}})")], 0, y, 8, 8,
      unit="percentunit")
panel("timeseries", "Job memory (RSS / limit)",
      [(f"corral_job_memory_rss_bytes{{{N}}} / (corral_job_memory_limit_bytes{{{N}}} > 0)",
        "job {{job_id}} ({{user}})")], 8, y, 8, 8, unit="percentunit")
panel("timeseries", "Job GPU utilization",
      [(f"corral_job_gpu_utilization_ratio{{{N}}}", "job {{job_id}} gpu{{gpu}}")],
      16, y, 8, 8, unit="percentunit")
y += 8
panel("table", "Running jobs per node", [(f"corral_agent_jobs_running{{{N}}}", "{{node}}")],
      0, y, 24, 6, options={"showHeader": True})


def variable(name: str, query: str, label: str) -> dict[str, Any]:
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": name}, "definition": query,
            "includeAll": True, "multi": True, "allValue": ".*", "refresh": 2,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}}


dashboard = {
    "title": "Corral cluster",
    "uid": "corral-cluster",
    "description": "Jobs, queue, utilization, fair share, nodes and GPUs of a Corral cluster "
                   "(metrics of corral.ops: controller /metrics and agent /metrics).",
    "tags": ["corral", "hpc", "scheduler"],
    "timezone": "browser",
    "schemaVersion": 39,
    "version": 1,
    "editable": True,
    "refresh": "30s",
    "time": {"from": "now-6h", "to": "now"},
    "templating": {"list": [
        {"name": "datasource", "label": "Prometheus", "type": "datasource",
         "query": "prometheus", "current": {}},
        variable("partition", "label_values(corral_partition_cpus, partition)", "Partition"),
        variable("node", "label_values(corral_node_cpus, node)", "Node"),
    ]},
    "annotations": {"list": []},
    "panels": panels,
}

if __name__ == "__main__":
    out = Path(__file__).with_name("corral-dashboard.json")
    out.write_text(json.dumps(dashboard, indent=2) + "\n")
    print(f"wrote {out} ({len(panels)} panels)")
