"""Volcano Jobs whose replicas run in their task's image (issue 14, ``[controller]
volcano_images = "container"``), with the real kubectl: images from a registry on
loopback, pulled by the node's agent as for ``srun --container-image``; the replica runs
as the submitting user (root here: the launcher's Python must be one every user can
run, and this machine's is under /root); two tasks in two images; a bad reference and a
registry outside ``allowed_registries`` refused at apply with the field path; a task
without an image still runs on the host."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import TEST_CONFIG, Cluster, corral
from tests.e2e.test_kubectl import KUBECTL, Kube, vcjob
from tests.registry import Registry, require_containers, running_registry

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")]


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    require_containers()
    with running_registry() as reg:
        reg.push_busybox("vc/cfd:1", os_name="Corral CFD Image",
                         extra={"opt/solver.txt": b"simpleFoam from the image\n"})
        reg.push_busybox("vc/ai:2", os_name="Corral AI Image")
        yield reg


@pytest.fixture(scope="module")
def ikube(registry: Registry) -> Iterator[Kube]:
    root = Path(tempfile.mkdtemp(prefix="corral-e2e-vcimg-"))
    os.chmod(root, 0o755)
    config = TEST_CONFIG.replace(
        "[controller]\n", '[controller]\nlisten = "127.0.0.1:0"\ntls = true\n'
        'volcano_images = "container"\n', 1) + (
        f'\n[containers]\ninsecure_registries = ["{registry.host}"]\n'
        f'allowed_registries = ["{registry.host}"]\ncache_dir = "{root}/images"\n')
    c = Cluster(root, config)
    c.up()
    try:
        os.chmod(c.work, 0o777)
        kc = root / "kubeconfig"
        r = corral("kubeconfig", "-o", str(kc),
                   env=dict(os.environ, CORRAL_STATE_DIR=str(c.state_dir)))
        assert r.returncode == 0, r.stderr
        yield Kube(c, kc)
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


def itask(kube: Kube, name: str, replicas: int, command: str,
          image: str | None) -> dict[str, Any]:
    ct: dict[str, Any] = {"name": name, "command": ["sh", "-c", command],
                          "workingDir": str(kube.c.work),
                          "resources": {"requests": {"cpu": 1, "memory": "50Mi"}}}
    if image is not None:
        ct["image"] = image
    return {"name": name, "replicas": replicas,
            "template": {"spec": {"restartPolicy": "Never", "containers": [ct]}}}


def k8s_ref(registry: Registry, name: str) -> str:
    return f"{registry.host}/{name}"  # Kubernetes style: host:port/name:tag


def test_replica_runs_in_its_image_as_the_user(ikube: Kube, registry: Registry) -> None:
    probe = (". /etc/os-release; echo os=$NAME uid=$(id -u) idx=$VC_TASK_INDEX "
             "mine=$MINE; cat /opt/solver.txt")
    t = itask(ikube, "solver", 1, probe, k8s_ref(registry, "vc/cfd:1"))
    t["template"]["spec"]["containers"][0]["env"] = [{"name": "MINE", "value": "from-pod"}]
    ikube.apply(vcjob("inimg", t, plugins={"env": []}))
    ikube.wait_phase("inimg", "Completed", timeout=90)
    out = ikube.run("logs", "inimg-solver-0").stdout
    assert out == (f"os=Corral CFD Image uid={os.getuid()} idx=0 mine=from-pod\n"
                   "simpleFoam from the image\n"), out
    pod = ikube.get("pod", "inimg-solver-0")
    assert pod["status"]["containerStatuses"][0]["image"] == k8s_ref(registry, "vc/cfd:1")
    assert pod["status"]["phase"] == "Succeeded"


def test_two_tasks_in_two_images(ikube: Kube, registry: Registry) -> None:
    # the seeds' CFD + AI shape: each task's replicas in their own image
    probe = ". /etc/os-release; echo $VC_TASK_INDEX $NAME"
    cfd = itask(ikube, "cfd-simulation", 2, probe, k8s_ref(registry, "vc/cfd:1"))
    ai = itask(ikube, "ai-training", 2, probe + "; echo cfd=$VC_CFD_SIMULATION_NUM",
               f"docker://{k8s_ref(registry, 'vc/ai:2')}")
    ikube.apply(vcjob("cfd-ai", cfd, ai, minAvailable=4, plugins={"env": [], "svc": []}))
    ikube.wait_phase("cfd-ai", "Completed", timeout=90)
    for i in range(2):
        assert ikube.run("logs", f"cfd-ai-cfd-simulation-{i}").stdout == \
            f"{i} Corral CFD Image\n"
        assert ikube.run("logs", f"cfd-ai-ai-training-{i}").stdout == \
            f"{i} Corral AI Image\ncfd=2\n"


def test_bad_image_and_other_registry_refused_with_path(ikube: Kube,
                                                        registry: Registry) -> None:
    ok = itask(ikube, "a", 1, "true", k8s_ref(registry, "vc/cfd:1"))
    bad = itask(ikube, "b", 1, "true", "Not/Valid")
    r = ikube.apply(vcjob("badimg", ok, bad), ok=False)
    assert r.returncode == 1, r.stdout
    assert "spec.tasks[1].template.spec.containers[0].image: Invalid value: 'Not/Valid'" \
        in r.stderr, r.stderr
    assert "tasks[0]" not in r.stderr, r.stderr
    far = itask(ikube, "c", 1, "true", "busybox:1.36")
    r = ikube.apply(vcjob("farimg", far), ok=False)
    assert r.returncode == 1
    assert ("spec.tasks[0].template.spec.containers[0].image: Forbidden: image registry "
            f"docker.io is not allowed here (allowed: {registry.host})") in r.stderr, r.stderr


def test_missing_image_fails_the_pod(ikube: Kube, registry: Registry) -> None:
    ikube.apply(vcjob("noimg", itask(ikube, "m", 1, "true", k8s_ref(registry, "vc/none:1"))))
    ikube.wait_phase("noimg", "Failed", timeout=60)
    out = ikube.run("logs", "noimg-m-0").stdout
    assert "image pull failed" in out and "manifest unknown" in out, out
    assert ikube.get("pod", "noimg-m-0")["status"]["phase"] == "Failed"


def test_task_without_image_runs_on_the_host(ikube: Kube) -> None:
    host_os = Path("/etc/os-release").read_text()
    name = next(line.split("=", 1)[1].strip('"') for line in host_os.splitlines()
                if line.startswith("NAME="))
    ikube.apply(vcjob("hostjob", itask(ikube, "h", 1, ". /etc/os-release; echo $NAME",
                                       None)))
    ikube.wait_phase("hostjob", "Completed", timeout=60)
    assert ikube.run("logs", "hostjob-h-0").stdout == f"{name}\n"
