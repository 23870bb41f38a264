"""What the scheduler computes, as JSON for ``sshare`` and ``sprio`` (and the web UI).

Both read a live ``Controller`` (typed ``Any``: ``ops`` does not import the controller)
and are called on its event loop, by the REST routes (``corral.web.routes``) and by the
in-controller shim client (``corral.shims.inproc``), so the two paths give the same data:

- ``fairshare_payload``: ``{"algorithm": "fair_tree"|"classic", "rows": [ShareRow...]}``
  over the configured association tree and the controller's decayed usage map;
- ``priorities_payload``: the multifactor breakdown of every pending job
  (``corral.core.priority.explain_all``, one fair-share computation for all), with the
  weights, so ``sprio`` can drop the columns whose weight is zero as Slurm does.
"""

from __future__ import annotations

from typing import Any


def fairshare_payload(ctl: Any) -> dict[str, Any]:
    from corral.ops.fairshare import share_rows

    rows = share_rows(ctl.cfg.account_tree(), dict(ctl.usage))
    algo = getattr(ctl.sched.sched_cfg.fairshare, "value", "fair_tree")
    return {"algorithm": algo, "rows": [r.to_json() for r in rows]}


def weights_json(cfg: Any) -> dict[str, Any]:
    w = cfg.weights
    return {"age": w.age, "assoc": w.assoc, "fairshare": w.fairshare,
            "job_size": w.job_size, "partition": w.partition, "qos": w.qos,
            "max_age_s": w.max_age_s}


def priorities_payload(ctl: Any, now: float) -> dict[str, Any]:
    """``{"ordering", "weights", "jobs": [{id, array_job_id, array_task_id, user, uid,
    account, partition, qos, factors: {name: {value, weight, contribution}}, site, nice,
    total, admin_priority}]}`` for every pending job."""
    from corral.core.priority import explain_all
    from corral.core.snapshot import ClusterSnapshot

    cfg = ctl.sched.sched_cfg
    recs = list(ctl.pending.values())
    snap = ClusterSnapshot(
        nodes=tuple(n.to_core() for n in ctl.nodes.nodes.values()),
        partitions=ctl.nodes.partitions, qos=ctl.cfg.qos_models(),
        accounts=ctl.cfg.account_tree(),
        pending=tuple(r.to_core() for r in recs),
        running=tuple(r.to_core() for r in ctl.running.values()),
        usage=dict(ctl.usage))
    explained = explain_all(snap, cfg, now)
    jobs: list[dict[str, Any]] = []
    for rec in recs:
        api = rec.to_api(now)
        f = explained.get(int(api["id"]))
        if f is None:
            continue
        jobs.append({
            "id": api["id"], "array_job_id": api.get("array_job_id"),
            "array_task_id": api.get("array_task_id"), "user": api.get("user"),
            "uid": api.get("uid"), "account": api.get("account"),
            "partition": api.get("partition"), "qos": api.get("qos"),
            "factors": {x.name: {"value": x.value, "weight": x.weight,
                                 "contribution": x.contribution} for x in f.factors},
            "site": f.site, "nice": f.nice, "total": f.total,
            "admin_priority": f.admin_priority,
        })
    jobs.sort(key=lambda j: int(j["id"]))
    return {"ordering": getattr(cfg.ordering, "value", str(cfg.ordering)),
            "weights": weights_json(cfg), "jobs": jobs}
