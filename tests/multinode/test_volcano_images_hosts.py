"""Volcano replicas in their image on other hosts (issue 14): a registry on the head
host (its network namespace), each compute host's agent pulling the image into its own
cache and running its replica there as an srun step with ``--container-image``; the
image's ENTRYPOINT + CMD run where the manifest gives no command."""

from __future__ import annotations

import pwd
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.multinode.hosts import NetnsCluster
from tests.registry import Registry, require_containers, running_registry

pytestmark = [pytest.mark.multinode, pytest.mark.root]


@pytest.fixture()
def image_hosts(netns_available: None) -> Iterator[tuple[NetnsCluster, Registry]]:
    require_containers()
    c = NetnsCluster(2)
    addr = f"{c.head.ip}:5000"
    c.reconfigure({"controller": {"volcano_images": "container"},
                   "containers": {"insecure_registries": [addr],
                                  "allowed_registries": [addr]}})
    c.start()
    try:
        with running_registry(c.head.ip, lambda argv: c.wrap("head", argv, uts=False)) \
                as reg:
            assert reg.host == addr
            reg.push_busybox("vc/spread:1", os_name="Corral Spread Image", config={
                "Entrypoint": ["/bin/sh", "-c", '. /etc/os-release; echo "$0" "$@" '
                               '$VC_TASK_INDEX $(uname -n) "$NAME" $(pwd)', "ep"],
                "Cmd": ["from-cmd"], "WorkingDir": "/etc"})
            yield c, reg
    finally:
        c.stop()


def test_image_replicas_run_on_their_hosts(image_hosts: tuple[NetnsCluster, Registry]
                                           ) -> None:
    c, reg = image_hosts
    manifest = {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
        "metadata": {"name": "imgspread"},
        "spec": {"plugins": {"env": []}, "tasks": [{
            "name": "w", "replicas": 2, "template": {"spec": {"containers": [{
                "name": "w", "image": f"{reg.host}/vc/spread:1",
                # a whole host each: the two replicas land on the two hosts
                "resources": {"requests": {"cpu": c.cpus, "memory": "100Mi"}}}]}}}]}}
    jid = int(c.client.request("POST", "/volcano/jobs", manifest)["job_id"])
    job = c.wait_done(jid, 120)
    assert job["state"] == "COMPLETED", (job, c.logs())
    steps = {s["name"]: s for s in job["steps"]}
    assert sorted(steps) == ["imgspread-w-0", "imgspread-w-1"], job["steps"]
    nodes = [steps[f"imgspread-w-{i}"]["nodes"][0] for i in range(2)]
    assert sorted(nodes) == sorted(c.names)
    # the job's directory: the user's home (root's here), as no task gave a host one
    logs = Path(pwd.getpwuid(0).pw_dir) / ".corral" / f"vcjob-{jid}"
    for i, node in enumerate(nodes):
        assert (logs / f"imgspread-w-{i}.log").read_text() == \
            f"ep from-cmd {i} {node} Corral Spread Image /etc\n"
    shutil.rmtree(logs)
    for h in c.hosts:  # each host pulled it into its own cache
        assert any((h.state_dir / "images" / "images").iterdir()), h.name
