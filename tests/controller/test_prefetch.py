"""Early pulls of pending jobs' images (corral.controller.prefetch): which planned starts
are pulled for and where, the per-node bound, what the job shows, failures and
disconnects. The agents are stand-ins that record what they were sent; the real pulls
run in tests/agent/test_early_pulls.py and through a cluster in
tests/e2e/test_containers.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from corral.config.load import parse_config
from corral.containers.spec import ContainerSpec, parse_image
from corral.controller.prefetch import RETRY_S, Prefetcher
from corral.controller.records import JobRecord
from corral.core.decisions import Reserve
from corral.core.model.job import JobSpec
from corral.submission import JobSubmission

REF = "docker://127.0.0.1:5000/a:1"


class Conn:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, msg: dict[str, Any]) -> None:
        self.sent.append(msg)


def job(jid: int, image: str | None) -> JobRecord:
    extra = {"container": ContainerSpec(parse_image(image)).to_text()} if image else {}
    return JobRecord(id=jid, sub=JobSubmission(spec=JobSpec(name="j", user="alice", uid=1001,
                                                            gid=1002),
                                               script="#!/bin/sh\n", workdir="/tmp",
                                               extra=extra), submit_time=0.0)


def controller(jobs: list[JobRecord], nodes: dict[str, list[str]], **containers: Any
               ) -> tuple[Any, dict[str, Conn]]:
    conns = {n: Conn() for n in nodes}
    ctl = SimpleNamespace(
        cfg=parse_config({"containers": containers}),
        pending={r.id: r for r in jobs}, jobs={r.id: r for r in jobs},
        hub=SimpleNamespace(conns=conns),
        nodes=SimpleNamespace(nodes={n: SimpleNamespace(images=[{"refs": refs}])
                                     for n, refs in nodes.items()}))
    return ctl, conns


def test_planned_nodes_without_the_image_pull_it_within_the_horizon() -> None:
    a, b, plain, far = job(1, "127.0.0.1:5000/a:1"), job(2, "127.0.0.1:5000/a:1"), \
        job(3, None), job(4, "127.0.0.1:5000/far:1")
    ctl, conns = controller([a, b, plain, far], {"n1": [], "n2": [REF], "n3": []})
    pf = Prefetcher(ctl)
    plan = [Reserve(1, 100.0, ("n1", "n2")), Reserve(2, 50.0, ("n1",)),
            Reserve(3, 10.0, ("n3",)), Reserve(4, 2000.0, ("n3",)), Reserve(1, 10.0, ())]
    assert pf.plan(plan, 0.0) == 1  # n1 once for both jobs; n2 has it; 3 has no image
    assert conns["n1"].sent == [{"t": "image_pull", "ref": REF, "early": True}]
    assert conns["n2"].sent == conns["n3"].sent == []  # job 4: beyond 1800 s
    asked = f"pull of {REF} asked for ahead of the start"
    assert a.image_prefetch == b.image_prefetch == {"n1": asked}
    assert not plain.image_prefetch and not far.image_prefetch  # none asked (None)
    assert plain.to_api(0.0)["image_prefetch"] == {}
    assert a.to_api(0.0)["image_prefetch"] == {"n1": asked}
    assert pf.plan(plan, 1.0) == 0  # asked already: not again
    pf.report("n1", [{"ref": REF, "state": "pulling", "note": f"pulling {REF}: 3.1 MB"}], 2.0)
    assert a.image_prefetch["n1"] == f"pulling {REF}: 3.1 MB (ahead of the start)"
    pf.report("n1", [{"ref": REF, "state": "done", "digest": "sha256:ab"},
                     {"ref": "docker://other/x:1", "state": "done"}], 3.0)  # not ours
    assert b.image_prefetch == {"n1": f"{REF} pulled ahead of the start"}
    assert pf.pulls == {}
    ctl.nodes.nodes["n1"].images = [{"refs": [REF]}]
    assert pf.plan(plan, 4.0) == 0  # n1 holds it now
    assert pf.plan([Reserve(4, 1000.0, ("n3",))], 1000.0) == 1  # now within the horizon


def test_per_node_bound_sif_ids_failure_retry_and_disconnect() -> None:
    jobs = [job(1, "127.0.0.1:5000/a:1"), job(2, "127.0.0.1:5000/b:1"), job(3, "/srv/c.sif")]
    ctl, conns = controller(jobs, {"n1": []}, prefetch_per_node=2)
    pf = Prefetcher(ctl)
    plan = [Reserve(j.id, 10.0 * j.id, ("n1",)) for j in jobs]
    assert pf.plan(plan, 0.0) == 2  # the two earliest; the third waits for a free slot
    assert [m["ref"] for m in conns["n1"].sent] == [REF, "docker://127.0.0.1:5000/b:1"]
    pf.report("n1", [{"ref": REF, "state": "failed", "error": "cannot pull x: 404"}], 5.0)
    assert jobs[0].image_prefetch["n1"] == (
        f"early pull of {REF} failed: cannot pull x: 404 (the job pulls it where it starts)")
    assert pf.plan(plan, 6.0) == 1  # a slot is free: the SIF, opened as the job's user
    assert conns["n1"].sent[-1] == {"t": "image_pull", "ref": "/srv/c.sif", "early": True,
                                    "uid": 1001, "gid": 1002}
    assert pf.plan(plan, 7.0) == 0  # the failed one is not asked again at once ...
    pf.node_gone("n1")  # ... the active ones are forgotten with the agent
    assert [p.state for p in pf.pulls.values()] == ["failed"]
    n1 = conns.pop("n1")
    assert pf.plan(plan, 8.0) == 0  # not connected: nothing sent
    conns["n1"] = n1
    assert pf.plan(plan, 9.0) == 2
    assert pf.plan(plan, 10.0) == 0  # both slots taken again
    pf.report("n1", [{"ref": "/srv/c.sif", "state": "done"}], 11.0)
    ctl.nodes.nodes["n1"].images = [{"refs": ["/srv/c.sif"]}]  # with the state message
    assert pf.plan(plan, 12.0) == 0  # a free slot, but the failed image waits ...
    assert pf.plan(plan, 5.0 + RETRY_S + 1) == 1  # ... for RETRY_S


def test_prefetch_off() -> None:
    ctl, conns = controller([job(1, "127.0.0.1:5000/a:1")], {"n1": []}, prefetch=False)
    assert Prefetcher(ctl).plan([Reserve(1, 1.0, ("n1",))], 0.0) == 0
    assert conns["n1"].sent == []
