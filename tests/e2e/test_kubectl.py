"""The real kubectl against a running Corral cluster (issue 14): Volcano Jobs applied,
listed (table and YAML), described, their pods' logs read, waited for, deleted; a gang
that cannot fit waits whole; the seeds' two-task CFD + AI job with host commands; a
field Corral cannot honour refused with its path; another user's jobs invisible; every
exported job valid against the Volcano CRD schema. One TLS cluster for the module:
kubectl sends no bearer token over plain HTTP."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.cluster import TEST_CONFIG, Cluster, corral, wait_for

KUBECTL = os.environ.get("CORRAL_TEST_KUBECTL") or shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed "
                                                         "(scripts/system-deps installs it)")
CONFIG = TEST_CONFIG.replace("[controller]\n",
                             '[controller]\nlisten = "127.0.0.1:0"\ntls = true\n'
                             'volcano_images = "host"\n', 1)


class Kube:
    def __init__(self, cluster: Cluster, kubeconfig: Path) -> None:
        self.c = cluster
        self.kubeconfig = kubeconfig

    def run(self, *args: str, stdin: str | None = None, ok: bool = True,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        assert KUBECTL is not None
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig))
        r = subprocess.run([KUBECTL, *args], input=stdin, capture_output=True, text=True,
                           env=env, timeout=timeout)
        if ok:
            assert r.returncode == 0, f"kubectl {' '.join(args)}: {r.stdout}{r.stderr}\n" \
                                      f"{self.c.logs()}"
        return r

    def apply(self, manifest: dict[str, Any], *args: str, ok: bool = True
              ) -> subprocess.CompletedProcess[str]:
        return self.run("apply", "-f", "-", *args, stdin=yaml.safe_dump(manifest), ok=ok)

    def get(self, *what: str) -> Any:
        return json.loads(self.run("get", *what, "-o", "json").stdout)

    def wait_phase(self, name: str, phase: str, timeout: int = 30) -> None:
        r = self.run("wait", f"--for=jsonpath={{.status.state.phase}}={phase}",
                     f"vcjob/{name}", f"--timeout={timeout}s", timeout=timeout + 10, ok=False)
        if r.returncode != 0:
            got = self.run("get", "vcjob", name, "-o", "yaml", ok=False).stdout
            pods = self.run("get", "pods", "-l", f"volcano.sh/job-name={name}", "-o", "yaml",
                            ok=False).stdout
            raise AssertionError(f"{name} not {phase}: {r.stderr}\n{got}\n{pods}\n"
                                 f"{self.c.logs()}")


@contextmanager
def kube_cluster(prefix: str, config: str) -> Iterator[Kube]:
    """A cluster of ``config`` up, with a kubeconfig for it; ``task`` puts replicas in
    its work directory."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    c = Cluster(root, config)
    c.up()
    global WORKDIR
    WORKDIR = str(c.work)
    try:
        kc = root / "kubeconfig"
        env = dict(os.environ, CORRAL_STATE_DIR=str(c.state_dir))
        r = corral("kubeconfig", "-o", str(kc), env=env)
        assert r.returncode == 0, r.stderr
        yield Kube(c, kc)
    finally:
        c.down()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def kube() -> Iterator[Kube]:
    with kube_cluster("corral-e2e-", CONFIG) as k:
        yield k


def vcjob(name: str, *tasks: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
            "metadata": {"name": name}, "spec": {"schedulerName": "volcano", **spec,
                                                 "tasks": list(tasks)}}


WORKDIR = ""  # the module cluster's shared work directory (set by the fixture)


def task(name: str, replicas: int, command: str, cpu: int | str = 1,
         memory: str = "50Mi", **pod: Any) -> dict[str, Any]:
    return {"name": name, "replicas": replicas, "template": {"spec": {
        "restartPolicy": "Never", **pod,
        "containers": [{"name": name, "image": "busybox", "command": ["sh", "-c", command],
                        "workingDir": WORKDIR,
                        "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}}}


def test_apply_get_describe_logs_wait_delete(kube: Kube) -> None:
    job = vcjob("hello", task("worker", 2, "echo hello $VC_TASK_INDEX of $VC_WORKER_NUM; "
                              "cat $VC_HOSTFILE_DIR/worker.host"),
                plugins={"env": [], "svc": []}, queue="default")
    assert "job.batch.volcano.sh/hello created" in kube.apply(job).stdout
    kube.wait_phase("hello", "Completed")
    table = kube.run("get", "vcjob", "-o", "wide").stdout.splitlines()
    assert table[0].split() == ["NAME", "STATUS", "MINAVAILABLE", "RUNNINGS", "AGE", "QUEUE"]
    assert table[1].split()[:4] == ["hello", "Completed", "2", "0"]
    obj = yaml.safe_load(kube.run("get", "vcjob", "hello", "-o", "yaml").stdout)
    assert obj["status"]["state"]["phase"] == "Completed"
    assert obj["status"]["succeeded"] == 2 and obj["spec"] == job["spec"]
    pods = kube.run("get", "pods", "-o", "wide").stdout.splitlines()
    assert [p.split()[:3] for p in pods[1:]] == [["hello-worker-0", "0/1", "Completed"],
                                                ["hello-worker-1", "0/1", "Completed"]]
    assert all(p.split()[-1] == "testnode" for p in pods[1:])
    assert kube.run("logs", "hello-worker-1").stdout == "hello 1 of 2\ntestnode\ntestnode\n"
    described = kube.run("describe", "vcjob", "hello").stdout
    assert "Phase:" in described and "Scheduled" in described and "Completed" in described
    # the same job through Corral's own API (squeue, corral queue)
    jid = int(obj["metadata"]["annotations"]["corral.dev/job-id"])
    assert kube.c.job(jid)["name"] == "hello" and kube.c.job(jid)["state"] == "COMPLETED"
    # apply again: unchanged; new labels: configured; a new spec: refused by its path
    assert "unchanged" in kube.apply(job).stdout
    job["metadata"]["labels"] = {"team": "cfd"}
    assert "configured" in kube.apply(job).stdout
    assert kube.get("vcjob", "-l", "team=cfd")["items"][0]["metadata"]["name"] == "hello"
    job["spec"]["tasks"][0]["replicas"] = 3
    r = kube.apply(job, ok=False)
    assert r.returncode == 1 and 'The Job "hello" is invalid: spec: Forbidden' in r.stderr
    assert 'job.batch.volcano.sh "hello" deleted' in kube.run("delete", "vcjob", "hello").stdout
    r = kube.run("get", "vcjob", "hello", ok=False)
    assert r.returncode == 1 and "NotFound" in r.stderr


def test_a_gang_that_cannot_fit_waits_whole(kube: Kube) -> None:
    c = kube.c
    blocker = c.submit("sleep 120", cpus_per_task=10)  # 6 of the node's 16 CPUs stay free
    c.wait_state(blocker, "RUNNING")
    try:
        kube.apply(vcjob("gang", task("a", 4, "true"), task("b", 4, "true")))
        # a smaller minimum starts now on what is free: 6 of 8 replicas, the other 2 once
        # those ended (late replicas); a time limit below the blocker's lets them backfill
        # before the gang's reservation
        kube.apply(vcjob("partial", task("a", 4, "true", activeDeadlineSeconds=30),
                         task("b", 4, "true", activeDeadlineSeconds=30), minAvailable=5))
        kube.wait_phase("partial", "Completed", timeout=60)
        assert kube.get("vcjob", "partial")["status"]["succeeded"] == 8
        gang = kube.get("vcjob", "gang")
        assert gang["status"]["state"]["phase"] == "Pending"
        assert gang["status"]["state"]["reason"] == "Resources"
        pods = kube.get("pods", "-l", "volcano.sh/job-name=gang")["items"]
        assert len(pods) == 8 and {p["status"]["phase"] for p in pods} == {"Pending"}
        events = kube.run("get", "events").stdout
        assert "PodGroupPending" in events and "job/gang" in events
        jid = int(gang["metadata"]["annotations"]["corral.dev/job-id"])
        assert c.job(jid)["state"] == "PENDING" and not c.job(jid)["steps"]
    finally:
        c.client.cancel([blocker])
    kube.wait_phase("gang", "Completed")
    assert kube.get("vcjob", "gang")["status"]["succeeded"] == 8
    # every group's share was given back (the second group's CPUs on a node leaked)
    assert c.client.nodes()[0]["alloc_cpus"] == 0


def test_the_seeds_cfd_ai_job_with_host_commands(kube: Kube) -> None:
    # shared/seeds/001: minAvailable 8, a CFD task of 4 and an AI task of 4 replicas; the
    # images' programs are host commands here (volcano_images = "host"; the images in
    # their images: test_kubectl_images), sized to fit
    cfd = task("cfd-simulation", 4, "echo simpleFoam rank $VC_TASK_INDEX", cpu=2,
               memory="100Mi")
    ai = task("ai-training", 4, "echo train.py worker $VC_TASK_INDEX; "
              "echo cfd=$VC_CFD_SIMULATION_NUM", cpu="500m")
    kube.apply(vcjob("cfd-ai-hybrid", cfd, ai, minAvailable=8,
                     plugins={"env": [], "svc": []}))
    kube.wait_phase("cfd-ai-hybrid", "Completed")
    st = kube.get("vcjob", "cfd-ai-hybrid")["status"]
    assert st["succeeded"] == 8 and st["taskStatusCount"] == {
        "cfd-simulation": {"phase": {"Succeeded": 4}},
        "ai-training": {"phase": {"Succeeded": 4}}}
    assert kube.run("logs", "cfd-ai-hybrid-ai-training-3").stdout == \
        "train.py worker 3\ncfd=4\n"
    assert kube.run("logs", "cfd-ai-hybrid-cfd-simulation-0").stdout == "simpleFoam rank 0\n"


def test_policies_abort_a_job_on_a_failed_pod(kube: Kube) -> None:
    kube.apply(vcjob("abort", task("w", 2, "if [ $VC_TASK_INDEX = 1 ]; then exit 3; fi; "
                                   "sleep 60"),
                     plugins={"env": []}, policies=[{"event": "PodFailed",
                                                     "action": "AbortJob"}]))
    kube.wait_phase("abort", "Aborted")
    pods = {p["metadata"]["name"]: p for p in kube.get("pods", "-l",
                                                       "volcano.sh/job-name=abort")["items"]}
    term = pods["abort-w-1"]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 3 and pods["abort-w-1"]["status"]["phase"] == "Failed"


def test_restarts_count_against_max_retry(kube: Kube) -> None:
    marker = f"{WORKDIR}/restart-marker-$CORRAL_JOB_ID"
    flaky = task("w", 1, f"if [ -e {marker} ]; then echo second; else touch {marker}; "
                         "echo first; exit 1; fi")
    flaky["template"]["spec"]["restartPolicy"] = "OnFailure"  # = RestartPod on PodFailed
    kube.apply(vcjob("flaky", flaky))
    kube.wait_phase("flaky", "Completed")
    pod = kube.get("pod", "flaky-w-0")
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 1
    assert kube.run("logs", "flaky-w-0").stdout == "first\nsecond\n"
    kube.apply(vcjob("doomed", task("w", 2, "exit 1"), maxRetry=1,
                     policies=[{"event": "PodFailed", "action": "RestartJob"}]))
    kube.wait_phase("doomed", "Failed")
    assert kube.get("vcjob", "doomed")["status"]["retryCount"] == 1


def test_ttl_after_finished_removes_the_job_from_kubectl(kube: Kube) -> None:
    made = json.loads(kube.run("create", "-f", "-", "-o", "json", stdin=yaml.safe_dump(
        vcjob("short-lived", task("t", 1, "true"), ttlSecondsAfterFinished=0))).stdout)
    jid = int(made["metadata"]["annotations"]["corral.dev/job-id"])
    assert kube.c.wait_done(jid)["state"] == "COMPLETED"
    r = kube.run("get", "vcjob", "short-lived", ok=False)
    assert r.returncode == 1 and "NotFound" in r.stderr
    assert kube.c.job(jid)["name"] == "short-lived"  # Corral keeps its record


def test_logs_never_follow_a_link_or_read_a_fifo(kube: Kube) -> None:
    kube.apply(vcjob("linked", task("t", 2, "echo mine")))
    kube.wait_phase("linked", "Completed")
    jid = kube.get("vcjob", "linked")["metadata"]["annotations"]["corral.dev/job-id"]
    logs = Path(WORKDIR) / ".corral" / f"vcjob-{jid}"
    assert kube.run("logs", "linked-t-0").stdout == "mine\n"
    secret = Path(WORKDIR) / "secret.txt"
    secret.write_text("not for kubectl\n")
    (logs / "linked-t-0.log").unlink()
    (logs / "linked-t-0.log").symlink_to(secret)
    (logs / "linked-t-1.log").unlink()
    os.mkfifo(logs / "linked-t-1.log")
    assert kube.run("logs", "linked-t-0").stdout == ""
    assert kube.run("logs", "linked-t-1", timeout=10).stdout == ""


def test_min_success_completes_the_job_early(kube: Kube) -> None:
    kube.apply(vcjob("enough", task("w", 3, "if [ $VC_TASK_INDEX = 2 ]; then sleep 60; fi"),
                     plugins={"env": []}, minSuccess=2))
    kube.wait_phase("enough", "Completed", timeout=20)
    st = kube.get("vcjob", "enough")["status"]
    assert st["succeeded"] == 2 and st["failed"] == 1  # the third was stopped


def test_unsupported_fields_are_refused_with_their_path(kube: Kube) -> None:
    bad = vcjob("bad", task("t", 1, "true"))
    bad["spec"]["networkTopology"] = {"mode": "soft", "highestTierAllowed": 1}
    bad["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["envFrom"] = [
        {"configMapRef": {"name": "x"}}]
    r = kube.apply(bad, ok=False)
    assert r.returncode == 1
    assert 'The Job "bad" is invalid' in r.stderr
    assert "spec.networkTopology.mode: Forbidden: not supported by Corral" in r.stderr
    assert "spec.tasks[0].template.spec.containers[0].envFrom: Forbidden" in r.stderr
    unknown = vcjob("bad", task("t", 1, "true"))
    unknown["spec"]["tasks"][0]["replica"] = 2  # a typo
    r = kube.apply(unknown, "--validate=strict", ok=False)
    assert r.returncode == 1 and "spec.tasks[0].replica: Forbidden" in r.stderr
    r = kube.run("get", "vcjob", "bad", ok=False)
    assert "NotFound" in r.stderr
    r = kube.apply(vcjob("bad", task("t", 1, "true"), queue="nosuch", priorityClassName="x"),
                   ok=False)
    assert "spec.queue: Not found: queue 'nosuch'" in r.stderr
    assert "spec.priorityClassName: Not found" in r.stderr


OLDER = [p for p in (os.environ.get("CORRAL_TEST_KUBECTL_OLD"),  # e.g. Debian's 1.20
                     "/usr/lib/google-cloud-sdk/bin/kubectl.1.27") if p and os.path.exists(p)]


@pytest.mark.parametrize("binary", OLDER or [None])
def test_older_kubectl_validates_on_the_server_too(kube: Kube, binary: str | None) -> None:
    """kubectl before 1.29 reads the OpenAPI v2 document (protobuf) first."""
    if binary is None:
        pytest.skip("no older kubectl (set CORRAL_TEST_KUBECTL_OLD)")
    global KUBECTL
    saved, KUBECTL = KUBECTL, binary
    try:
        name = "old-" + os.path.basename(binary).replace(".", "-").replace("_", "-")[-12:]
        assert "created" in kube.apply(vcjob(name.strip("-"), task("t", 1, "true"))).stdout
        name = name.strip("-")
        wait_for(lambda: kube.get("vcjob", name)["status"]["state"]["phase"] == "Completed",
                 30, what=name)  # (kubectl wait has no jsonpath before 1.23)
        bad = vcjob("bad-old", task("t", 1, "true"))
        bad["spec"]["bogus"] = 1
        r = kube.apply(bad, ok=False)
        assert r.returncode == 1 and "spec.bogus: Forbidden" in r.stderr, r.stderr
    finally:
        KUBECTL = saved


def test_another_users_jobs_are_invisible(kube: Kube, test_user: Any) -> None:
    kube.apply(vcjob("mine", task("t", 1, "true")))
    token = kube.c.client.token(user=test_user.pw_name)
    cfg = yaml.safe_load(kube.kubeconfig.read_text())
    cfg["users"][0]["user"]["token"] = token
    theirs = kube.kubeconfig.with_name("theirs")
    theirs.write_text(yaml.safe_dump(cfg))
    other = Kube(kube.c, theirs)
    assert "No resources found" in other.run("get", "vcjob").stderr
    for verb in (("get", "vcjob", "mine"), ("delete", "vcjob", "mine"),
                 ("logs", "mine-t-0")):
        r = other.run(*verb, ok=False)
        assert r.returncode == 1 and "NotFound" in r.stderr, verb
    mine = kube.get("vcjob", "mine")
    assert other.get("nodes")["items"][0]["status"]["capacity"]["cpu"] == "16"
    # nor can they export it (the manifest carries the commands)
    from corral.client import Client, CorralError

    url = json.loads((kube.c.state_dir / "controller.json").read_text())["url"]
    with Client(url=url, token=token, ca_file=str(kube.c.state_dir / "ca.pem")) as cl:
        with pytest.raises(CorralError) as err:
            cl.request("GET", f"/jobs/{mine['metadata']['annotations']['corral.dev/job-id']}"
                              "/volcano")
    assert err.value.code == "forbidden"


def test_exported_jobs_validate_and_corral_submit_takes_a_manifest(kube: Kube) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from corral.controller.kube_discovery import crds

    validator = jsonschema.Draft7Validator(crds()["Job"])
    c = kube.c
    env = dict(os.environ, CORRAL_STATE_DIR=str(c.state_dir))
    sb = c.submit("hostname", nodes_min=1, ntasks=2, mem_per_node_mb=200)
    c.wait_done(sb)
    manifest = kube.c.root / "exported.yaml"
    r = corral("export", "--volcano", str(sb), env=env)
    assert r.returncode == 0, r.stderr
    out = yaml.safe_load(r.stdout)
    assert not list(validator.iter_errors(out))
    assert out["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["command"][:2] == \
        ["/bin/sh", "-c"]
    out["metadata"]["name"] = "from-sbatch"
    manifest.write_text(yaml.safe_dump(out))
    r = corral("submit", str(manifest), env=env)
    assert r.returncode == 0 and "Volcano Job default/from-sbatch" in r.stdout, r.stderr
    kube.wait_phase("from-sbatch", "Completed")
    vc = kube.get("vcjob", "from-sbatch")
    again = corral("export", "--volcano", vc["metadata"]["annotations"]["corral.dev/job-id"],
                   env=env)
    assert not list(validator.iter_errors(yaml.safe_load(again.stdout)))
    wait_for(lambda: "from-sbatch" in kube.run("get", "vcjob").stdout, 5)


def test_sbatch_jobs_show_as_read_only_vcjobs_with_pods(kube: Kube) -> None:
    """A job submitted with sbatch is listed by kubectl get vcjob and get pods (its
    export's spec, phase from its state), its batch pod's log is its output file, and
    kubectl cannot change or delete it."""
    import sys

    c = kube.c
    script = c.work / "view.sh"
    script.write_text("#!/bin/sh\n#SBATCH -J Sbatch_View\necho out-of-sbatch\n")
    env = {k: v for k, v in os.environ.items() if k != "CORRAL_URL"}
    env["CORRAL_SOCKET"] = str(c.state_dir / "corral.sock")
    r = subprocess.run([sys.executable, "-c",
                        "from corral.shims.lean import main; main('sbatch')", "--parsable",
                        str(script)], cwd=c.work, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    jid = int(r.stdout.strip())
    c.wait_done(jid)
    name = f"sbatch-view-{jid}"
    wait_for(lambda: kube.get("vcjob", name)["status"]["state"]["phase"] == "Completed", 10,
             what="the sbatch job's phase")
    obj = kube.get("vcjob", name)
    ann = obj["metadata"]["annotations"]
    assert ann["corral.dev/submitted-with"] == "sbatch" and ann["corral.dev/read-only"] == "true"
    assert ann["corral.dev/job-id"] == str(jid)
    assert [t["name"] for t in obj["spec"]["tasks"]] == ["batch"]
    assert obj["status"]["succeeded"] == 1
    row = next(ln for ln in kube.run("get", "vcjob").stdout.splitlines()
               if ln.startswith(name + " "))
    assert row.split()[1] == "Completed"
    pods = kube.get("pods", "-l", f"volcano.sh/job-name={name}")["items"]
    assert [p["metadata"]["name"] for p in pods] == [f"{name}-batch-0"]
    assert pods[0]["status"]["phase"] == "Succeeded" and pods[0]["spec"]["nodeName"] == \
        "testnode"
    assert kube.run("logs", f"{name}-batch-0").stdout == "out-of-sbatch\n"
    for verb in (("delete", "vcjob", name), ("label", "vcjob", name, "a=b")):
        r = kube.run(*verb, ok=False)
        assert r.returncode == 1 and "kubectl only reads it" in r.stderr, (verb, r.stderr)
    assert kube.get("vcjob", name)["metadata"]["name"] == name  # still there


def test_ssh_plugin_runs_commands_on_the_jobs_hosts(kube: Kube) -> None:
    """The ssh plugin: ssh to a host of the svc host file, or to a replica's pod name,
    runs the command there as a job step (what mpirun's ssh launcher does)."""
    master = task("master", 1, "ssh -o StrictHostKeyChecking=no "
                               "$(head -1 $VC_HOSTFILE_DIR/worker.host) echo via-ssh; "
                               "ssh -p 22 sshjob-worker-0.sshjob 'echo by-pod-name'")
    master["policies"] = [{"event": "TaskCompleted", "action": "CompleteJob"}]
    kube.apply(vcjob("sshjob", master, task("worker", 1, "sleep 30"),
                     plugins={"ssh": ["--no-root"], "svc": ["--disable-network-policy"]},
                     minAvailable=2))
    kube.wait_phase("sshjob", "Completed", timeout=60)
    assert kube.run("logs", "sshjob-master-0").stdout.split() == ["via-ssh", "by-pod-name"]


def test_task_failed_event(kube: Kube) -> None:
    """TaskFailed: the task can no longer reach its minimum (here: every replica)."""
    w = task("w", 2, "if [ $VC_TASK_INDEX = 1 ]; then exit 4; fi; sleep 60")
    w["policies"] = [{"event": "TaskFailed", "action": "AbortJob"}]
    kube.apply(vcjob("tfail", w, plugins={"env": []}))
    kube.wait_phase("tfail", "Aborted", timeout=60)


def test_late_replicas_start_when_resources_free_up(kube: Kube) -> None:
    """minAvailable 1 of 2 replicas with one CPU free: the gang starts with replica 0;
    replica 1 waits (Pending, the job Running) and runs once the CPU is free again, in a
    companion job kubectl does not list; the job completes with both pods."""
    c = kube.c
    go = c.work / "late-go"
    blocker = c.submit(f"while [ ! -e {go} ]; do sleep 0.1; done", cpus_per_task=15,
                       mem_per_node_mb=100)
    try:
        c.wait_state(blocker, "RUNNING")
        hold = c.work / "late-hold"
        kube.apply(vcjob("late", task("w", 2, "echo late $VC_TASK_INDEX; if [ "
                                      f"$VC_TASK_INDEX = 0 ]; then while [ ! -e {hold} ]; "
                                      "do sleep 0.1; done; fi", memory="20Mi"),
                         plugins={"env": []}, minAvailable=1))

        def phases() -> dict[str, str]:
            return {p["metadata"]["name"]: p["status"]["phase"] for p in kube.get(
                "pods", "-l", "volcano.sh/job-name=late")["items"]}
        wait_for(lambda: phases().get("late-w-0") == "Running", 30, what="replica 0")
        assert phases()["late-w-1"] == "Pending"
        assert kube.get("vcjob", "late")["status"]["state"]["phase"] == "Running"
        hold.touch()  # replica 0 ends: its CPU is free for replica 1
        kube.wait_phase("late", "Completed", timeout=60)
        assert phases() == {"late-w-0": "Succeeded", "late-w-1": "Succeeded"}
        assert kube.run("logs", "late-w-1").stdout == "late 1\n"
        names = [i["metadata"]["name"] for i in kube.get("vcjob")["items"]]
        assert "late" in names and not any(n.startswith("late-late-") for n in names)
        obj = kube.get("vcjob", "late")
        assert obj["status"]["succeeded"] == 2
    finally:
        go.touch()
        (c.work / "late-hold").touch()  # a failed run leaves no replica waiting
        c.wait_done(blocker)
