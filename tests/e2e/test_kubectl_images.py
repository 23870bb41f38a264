"""Volcano Jobs whose replicas run in their task's image (issue 14, ``[controller]
volcano_images = "container"``), with the real kubectl: images from a registry on
loopback, pulled by the node's agent as for ``srun --container-image``; the replica runs
as the submitting user (root, and an unprivileged user whose launcher runs with
``volcano_python``, a Python every user can run); two tasks in two images; the image's
ENTRYPOINT/CMD/WorkingDir/Env under Kubernetes' rules, and a replica with nothing to run
failed as CreateContainerError; a bad reference and a registry outside
``allowed_registries`` refused at apply with the field path; a task without an image
still runs on the host."""

from __future__ import annotations

import os
import shutil
import sys
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
        # an image with an ENTRYPOINT, a CMD, a WorkingDir and an Env of its own
        reg.push_busybox("vc/entry:1", os_name="Corral Entry Image",
                         extra={"srv/imgwd/.keep": b"", "srv/podwd/.keep": b""},
                         config={"Entrypoint": ["/bin/sh", "-c", 'echo entry "$0" "$@" '
                                                "in $(pwd) img=$IMG_VAR", "ep"],
                                 "Cmd": ["cmd1", "cmd2"], "WorkingDir": "/srv/imgwd",
                                 "Env": ["IMG_VAR=from-image", "PATH=/bin"]})
        reg.push_busybox("vc/bare:1", os_name="Corral Bare Image")  # no ENTRYPOINT, CMD
        yield reg


def launcher_python(root: Path) -> Path:
    """A Python every user may run, importing this checkout's corral (this machine's
    test interpreter lives under /root, which other users cannot enter): the system's,
    with the sources and the virtual environment's packages on its path
    (``[controller] volcano_python``)."""
    import corral

    system = shutil.which("python3", path="/usr/bin:/bin")
    if system is None:
        pytest.skip("no system python3 for the launcher of a user's job")
    src = Path(corral.__file__).resolve().parents[1]
    site = [p for p in sys.path if p.endswith("site-packages") and
            os.access(p, os.R_OK | os.X_OK)]
    wrapper = root / "python"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={':'.join([str(src), *site])} "
                       f"exec {system} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper


@pytest.fixture(scope="module")
def ikube(registry: Registry) -> Iterator[Kube]:
    root = Path(tempfile.mkdtemp(prefix="corral-e2e-vcimg-"))
    os.chmod(root, 0o755)
    python = launcher_python(root)
    config = TEST_CONFIG.replace(
        "[controller]\n", '[controller]\nlisten = "127.0.0.1:0"\ntls = true\n'
        f'volcano_images = "container"\nvolcano_python = "{python}"\n', 1) + (
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


def entry_task(name: str, image: str, **container: Any) -> dict[str, Any]:
    ct: dict[str, Any] = {"name": name, "image": image, **container,
                          "resources": {"requests": {"cpu": 1, "memory": "50Mi"}}}
    return {"name": name, "replicas": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [ct]}}}


def test_image_entrypoint_and_cmd_as_kubernetes_runs_them(ikube: Kube,
                                                           registry: Registry) -> None:
    """Kubernetes' rule: neither command nor args: ENTRYPOINT + CMD; args only: ENTRYPOINT
    + args; command: it alone (CMD too is ignored); no workingDir: the image's WorkingDir;
    the image's Env under the pod's."""
    img = k8s_ref(registry, "vc/entry:1")
    ikube.apply(vcjob(
        "entry", entry_task("both", img), entry_task("args", img, args=["a1", "a 2"]),
        entry_task("cmd", img, command=["sh", "-c", "echo cmd $(pwd) $IMG_VAR $0 $1"],
                   env=[{"name": "IMG_VAR", "value": "from-pod"}]),
        entry_task("cmdargs", img, command=["sh", "-c", "echo cmdargs $(pwd) $0 $1"],
                   args=["p", "q"], workingDir="/srv/podwd"),
        minAvailable=4))
    ikube.wait_phase("entry", "Completed", timeout=90)
    logs = {t: ikube.run("logs", f"entry-{t}-0").stdout
            for t in ("both", "args", "cmd", "cmdargs")}
    assert logs == {"both": "entry ep cmd1 cmd2 in /srv/imgwd img=from-image\n",
                    "args": "entry ep a1 a 2 in /srv/imgwd img=from-image\n",
                    "cmd": "cmd /srv/imgwd from-pod sh\n",
                    "cmdargs": "cmdargs /srv/podwd p q\n"}, logs
    pod = ikube.get("pod", "entry-args-0")["spec"]["containers"][0]
    assert pod.get("args") == ["a1", "a 2"] and "command" not in pod, pod
    # the job's directory (the logs) is no directory of the image's: the user's home
    job = ikube.get("vcjob", "entry")
    assert job["status"]["state"]["phase"] == "Completed"


def test_no_command_and_an_image_without_one_fails_the_pod(ikube: Kube,
                                                          registry: Registry) -> None:
    ikube.apply(vcjob("bare", entry_task("b", k8s_ref(registry, "vc/bare:1"))))
    ikube.wait_phase("bare", "Failed", timeout=60)
    pod = ikube.get("pod", "bare-b-0")
    assert pod["status"]["phase"] == "Failed"
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    want = (f"no command specified: the image docker://{k8s_ref(registry, 'vc/bare:1')} "
            "has no ENTRYPOINT or CMD, and none was given")
    assert term["reason"] == "CreateContainerError" and term["message"] == want, term
    table = ikube.run("get", "pod", "bare-b-0").stdout.splitlines()
    assert table[1].split()[2] == "CreateContainerError", table
    assert want in ikube.run("logs", "bare-b-0").stdout
    events = ikube.get("events", "--field-selector",
                       "involvedObject.kind=Pod,involvedObject.name=bare-b-0")["items"]
    assert [(e["type"], e["reason"], e["message"]) for e in events] == [
        ("Warning", "CreateContainerError", f"Error: {want}")], events
    described = ikube.run("describe", "pod", "bare-b-0").stdout
    assert "CreateContainerError" in described, described


def test_a_missing_image_is_err_image_pull(ikube: Kube, registry: Registry) -> None:
    ikube.apply(vcjob("noimg2", entry_task("m", k8s_ref(registry, "vc/none:2"))))
    ikube.wait_phase("noimg2", "Failed", timeout=60)
    term = ikube.get("pod", "noimg2-m-0")["status"]["containerStatuses"][0]["state"][
        "terminated"]
    assert term["reason"] == "ErrImagePull" and "manifest unknown" in term["message"], term


def test_a_users_replicas_run_in_their_image_as_that_user(ikube: Kube, registry: Registry,
                                                          test_user: Any) -> None:
    """kubectl as an unprivileged user (a token of theirs): the launcher and every replica
    run as that user (the launcher through ``volcano_python``), in the image; the image's
    ENTRYPOINT + CMD too."""
    import yaml

    token = ikube.c.client.token(user=test_user.pw_name)
    cfg = yaml.safe_load(ikube.kubeconfig.read_text())
    cfg["users"][0]["user"]["token"] = token
    theirs = ikube.kubeconfig.with_name("theirs")
    theirs.write_text(yaml.safe_dump(cfg))
    other = Kube(ikube.c, theirs)
    wd = ikube.c.work / "theirs"  # their job's directory (the test user has no home)
    wd.mkdir(exist_ok=True)
    os.chown(wd, test_user.pw_uid, test_user.pw_gid)
    probe = entry_task("probe", k8s_ref(registry, "vc/cfd:1"), workingDir=str(wd),
                       command=["sh", "-c", ". /etc/os-release; echo $NAME uid=$(id -u) "
                                "$(pwd); cat /opt/solver.txt; touch mine"])
    entry = entry_task("entry", k8s_ref(registry, "vc/entry:1"))
    other.apply(vcjob("theirs", probe, entry, minAvailable=2))
    other.wait_phase("theirs", "Completed", timeout=90)
    assert other.run("logs", "theirs-probe-0").stdout == (
        f"Corral CFD Image uid={test_user.pw_uid} {wd}\nsimpleFoam from the image\n")
    assert other.run("logs", "theirs-entry-0").stdout == \
        "entry ep cmd1 cmd2 in /srv/imgwd img=from-image\n"
    assert (wd / "mine").stat().st_uid == test_user.pw_uid
    assert (wd / ".corral").stat().st_uid == test_user.pw_uid  # the launcher's too
    r = ikube.run("get", "vcjob", "theirs", ok=False)  # root is an operator: sees it
    assert r.returncode == 0, r.stderr
