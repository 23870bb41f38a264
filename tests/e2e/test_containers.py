"""Container jobs through a real cluster (corral up): sbatch's container options, a job as
a real user in an image from a registry on loopback, the node image cache (corral images,
corral image pull), a failed pull that leaves the node up."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.containers.spec import ContainerSpec, parse_image
from tests.apptainer import build_sif, find_apptainer
from tests.e2e.cluster import TEST_CONFIG, Cluster, corral, wait_for
from tests.e2e.conftest import USER
from tests.registry import Registry, require_containers, running_registry

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    require_containers()
    with running_registry() as reg:
        reg.push_busybox("e2e/bb:1", os_name="Corral E2E Image")
        yield reg


@pytest.fixture(scope="module")
def ccluster(registry: Registry, test_user: pwd.struct_passwd) -> Iterator[Cluster]:
    root = Path(tempfile.mkdtemp(prefix="corral-e2e-ctr-"))
    os.chmod(root, 0o755)
    config = TEST_CONFIG + (f'\n[containers]\ninsecure_registries = ["{registry.host}"]\n'
                            f'cache_dir = "{root}/images"\n')
    program, _why = find_apptainer()
    if program:
        config += f'apptainer = "{program}"\n'  
    c = Cluster(root, config)
    c.up()
    try:
        yield c
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


def shim(c: Cluster, prog: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CORRAL_SOCKET=str(c.sock))
    return subprocess.run([sys.executable, "-c", f"from corral.shims.lean import main; "
                           f"main({prog!r})", *args], capture_output=True, text=True, env=env,
                          cwd=c.work, timeout=60)


def test_sbatch_refuses_bad_container_options(ccluster: Cluster) -> None:
    r = shim(ccluster, "sbatch", "--container-image=Not/Valid", "--wrap=true")
    assert r.returncode == 1
    assert r.stderr.startswith("sbatch: error: invalid image reference 'Not/Valid'"), r.stderr
    r = shim(ccluster, "sbatch", "--container-image=busybox", "--container-remap-root",
             "--wrap=true")
    assert r.returncode == 1
    assert "--container-remap-root is not allowed on this cluster" in r.stderr, r.stderr


def test_user_job_in_an_image_then_cache_hit(ccluster: Cluster, registry: Registry,
                                             test_user: pwd.struct_passwd) -> None:
    ref = registry.ref("e2e/bb:1")
    spec = ContainerSpec(parse_image(ref)).to_text()
    out = ccluster.work / "ctr-%j.out"
    jid = ccluster.submit(". /etc/os-release; echo os=$NAME uid=$(id -u) job=$SLURM_JOB_ID",
                          user=USER, stdout=str(out), extra={"container": spec})
    job = ccluster.wait_done(jid, timeout=60)
    assert job["state"] == "COMPLETED", (job, ccluster.logs())
    text = (ccluster.work / f"ctr-{jid}.out").read_text()
    assert text.strip() == f"os=Corral E2E Image uid={test_user.pw_uid} job={jid}"
    # the node lists the image (its cache is reported with the agent's heartbeats); a
    # second job finds it cached
    def images() -> list[dict[str, object]]:
        r = corral("images", "--json", env=dict(os.environ, CORRAL_SOCKET=str(ccluster.sock)))
        assert r.returncode == 0, r.stderr
        return list(json.loads(r.stdout))

    rows = wait_for(images, 30, interval=0.1, what="the image in corral images")
    assert [(row["node"], row["image"]) for row in rows] == [("testnode", ref)], rows
    assert rows[0]["digest"].startswith("sha256:") and rows[0]["size_bytes"] > 1_000_000
    jid2 = ccluster.submit("true", user=USER, extra={"container": spec})
    assert ccluster.wait_done(jid2, timeout=60)["state"] == "COMPLETED"
    shown = corral("show", str(jid2), env=dict(os.environ, CORRAL_SOCKET=str(ccluster.sock)))
    assert "cached" in shown.stdout, shown.stdout


def test_failed_pull_ends_the_job_not_the_node(ccluster: Cluster, registry: Registry) -> None:
    spec = ContainerSpec(parse_image(registry.ref("e2e/missing:0"))).to_text()
    jid = ccluster.submit("true", user=USER, extra={"container": spec})
    job = ccluster.wait_done(jid, timeout=60)
    assert job["state"] == "FAILED"
    assert "image pull failed" in json.dumps(job), job
    node = ccluster.client.nodes()[0]
    assert node["state"] in ("IDLE", "MIXED", "ALLOCATED"), node


def test_image_pull_on_the_nodes(ccluster: Cluster, registry: Registry) -> None:
    ref = registry.push_busybox("e2e/pre:2", os_name="Prepulled")
    env = dict(os.environ, CORRAL_SOCKET=str(ccluster.sock))
    r = corral("image", "pull", ref, "--nodes", "testnode", env=env)
    assert r.returncode == 0, r.stdout + r.stderr

    def listed() -> bool:
        rows = json.loads(corral("images", "--json", env=env).stdout)
        return any(row["image"] == ref for row in rows)

    wait_for(listed, 60, what="the pre-pulled image in corral images")


def test_sif_job_runs_with_apptainer(ccluster: Cluster, registry: Registry,
                                     test_user: pwd.struct_passwd) -> None:
    program, why = find_apptainer()
    if not program:
        pytest.skip(why)
    env = dict(os.environ, CORRAL_SOCKET=str(ccluster.sock))
    sif = build_sif(program, registry.ref("e2e/bb:1"), ccluster.root / "e2e.sif")
    spec = ContainerSpec(parse_image(str(sif))).to_text()
    out = ccluster.work / "sif-%j.out"
    jid = ccluster.submit(". /etc/os-release; echo os=$NAME uid=$(id -u) job=$SLURM_JOB_ID",
                          user=USER, stdout=str(out), extra={"container": spec})
    job = ccluster.wait_done(jid, timeout=60)
    assert job["state"] == "COMPLETED", (job, ccluster.logs())
    text = (ccluster.work / f"sif-{jid}.out").read_text()
    assert text.strip() == f"os=Corral E2E Image uid={test_user.pw_uid} job={jid}", text
    shown = corral("show", str(jid), env=env).stdout
    assert "apptainer" in shown and "unpacked" in shown, shown

    def listed() -> bool:  # the SIF's sandbox is in the node's cache, under its sha256
        rows = json.loads(corral("images", "--json", env=env).stdout)
        return any(row["image"] == str(sif) and row["digest"].startswith("sha256:")
                   for row in rows)

    wait_for(listed, 30, what="the SIF in corral images")
    # corral image pull of another SIF: its sandbox is there before any job
    other = build_sif(program, registry.push_busybox("e2e/pre-sif:1", os_name="Pre SIF"),
                      ccluster.root / "pre.sif")
    os.chmod(ccluster.root / "pre.sif", 0o644)
    r = corral("image", "pull", str(other), env=env)
    assert r.returncode == 0, r.stdout + r.stderr

    def prepulled() -> bool:
        rows = json.loads(corral("images", "--json", env=env).stdout)
        return any(row["image"] == str(other) for row in rows)

    wait_for(prepulled, 30, what="the pre-pulled SIF in corral images")
    node = ccluster.client.nodes()[0]
    assert "apptainer" in (node.get("container_tools") or {}), node


def test_pending_job_image_is_pulled_before_its_node_frees_up(
        ccluster: Cluster, registry: Registry, test_user: pwd.struct_passwd) -> None:
    """The only node is busy with an exclusive job; a container job waits behind it. The
    scheduler plans it on that node, so the node pulls its image while the first job
    still runs (corral images lists it, the job says so); when the node frees up, the
    job starts from the cache."""
    env = dict(os.environ, CORRAL_SOCKET=str(ccluster.sock))
    ref = registry.push_busybox("e2e/early:1", os_name="Early Pull")
    gate = ccluster.work / "early-gate"
    blocker = ccluster.submit(f"while [ ! -e {gate} ]; do sleep 0.05; done", user=USER,
                              exclusive=True)
    ccluster.wait_state(blocker, "RUNNING")
    spec = ContainerSpec(parse_image(ref)).to_text()
    out = ccluster.work / "early-%j.out"
    jid = ccluster.submit(". /etc/os-release; echo os=$NAME uid=$(id -u)", user=USER,
                          stdout=str(out), extra={"container": spec})

    def listed() -> bool:
        rows = json.loads(corral("images", "--json", env=env).stdout)
        return any(row["image"] == ref for row in rows)

    wait_for(listed, 60, interval=0.1, what="the pending job's image in corral images")
    assert ccluster.job(blocker)["state"] == "RUNNING"
    assert ccluster.job(jid)["state"] == "PENDING"
    done = f"{ref} pulled ahead of the start"
    job = wait_for(lambda: (lambda j: j if j["image_prefetch"].get("testnode") == done
                            else None)(ccluster.job(jid)), 30, interval=0.1,
                   what="the early pull's end on the job")
    assert job["state"] == "PENDING", job
    shown = corral("show", str(jid), env=env).stdout
    assert "Image pull" in shown and f"testnode: {done}" in shown, shown
    gate.touch()
    job = ccluster.wait_done(jid, timeout=60)
    assert job["state"] == "COMPLETED", (job, ccluster.logs())
    assert (ccluster.work / f"early-{jid}.out").read_text().strip() == \
        f"os=Early Pull uid={test_user.pw_uid}"
    assert "cached" in job["container"] and "pulled)" not in job["container"], job
