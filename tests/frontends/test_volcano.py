"""Volcano Job manifests to Corral submissions, and Corral jobs back to Volcano Jobs that
validate against the Volcano v1.15 CRD schema (shared/schemas/volcano)."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.core.model.job import JobSpec, TaskGroup
from corral.frontends.volcano import ManifestError, parse_job, plan_of_script, quantity
from corral.frontends.volcano_export import export
from corral.submission import JobSubmission

SCHEMAS = Path("/work/shared/schemas/volcano")

# the seeds' mixed CFD + AI job (shared/seeds/001_*.txt), verbatim but for quoting
CFD_AI: dict[str, Any] = {
    "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
    "metadata": {"name": "cfd-ai-hybrid"},
    "spec": {"minAvailable": 8, "tasks": [
        {"name": "cfd-simulation", "replicas": 4, "template": {"spec": {"containers": [{
            "name": "cfd", "image": "registry.chpc.edu.cn/hpc/openfoam:latest",
            "command": ["mpirun", "-np", "4", "simpleFoam"],
            "resources": {"requests": {"cpu": 8, "memory": "32Gi", "nvidia.com/gpu": 0}}}]}}},
        {"name": "ai-training", "replicas": 4, "template": {"spec": {
            "containers": [{"name": "ai", "image": "registry.chpc.edu.cn/ai/pytorch:latest",
                            "command": ["python", "train.py"],
                            "resources": {"requests": {"cpu": 4, "memory": "16Gi",
                                                       "nvidia.com/gpu": 1}}}],
            "nodeSelector": {"gpu-type": "A100"}}}},
    ]},
}


@functools.cache
def _validator(kind: str = "Job") -> Any:
    jsonschema = pytest.importorskip("jsonschema")
    yaml = pytest.importorskip("yaml")
    name = {"Job": "batch.volcano.sh_jobs.yaml", "Queue": "scheduling.volcano.sh_queues.yaml"}
    path = SCHEMAS / name[kind]
    if path.exists():
        schema = yaml.safe_load(path.read_text())["spec"]["versions"][0]["schema"][
            "openAPIV3Schema"]
    else:  # the packaged copy (scripts/volcano-crds) where shared/ is not at hand
        from corral.controller.kube_discovery import crds

        schema = crds()[kind]
    return jsonschema.Draft7Validator(schema)


def _valid(manifest: dict[str, Any]) -> None:
    errors = [f"{'/'.join(map(str, e.path))}: {e.message}"
              for e in _validator().iter_errors(manifest)]
    assert not errors, errors


def test_the_seeds_cfd_ai_job_maps_to_a_gang_of_two_task_groups() -> None:
    vj = parse_job(CFD_AI, python="/usr/bin/python3")
    spec = vj.submission.spec
    assert spec.min_available == 8 and spec.name == "cfd-ai-hybrid"
    assert spec.task_groups == (
        TaskGroup("cfd-simulation", 4, 8, 32 * 1024, 0, None, None, None),
        TaskGroup("ai-training", 4, 4, 16 * 1024, 1, "A100", None, None))
    assert vj.submission.dialect == "volcano"
    plan = plan_of_script(vj.submission.script or "")
    assert plan is not None and [t["argv"] for t in plan["tasks"]] == [
        ["mpirun", "-np", "4", "simpleFoam"], ["python", "train.py"]]
    _valid(CFD_AI)


def test_fields_map_to_corral() -> None:
    m = copy.deepcopy(CFD_AI)
    m["metadata"]["namespace"] = "physics"
    m["spec"].update(queue="gpu", priorityClassName="high", maxRetry=2,
                     ttlSecondsAfterFinished=60, plugins={"env": [], "svc": []},
                     policies=[{"event": "PodFailed", "action": "RestartJob"}])
    ai = m["spec"]["tasks"][1]["template"]["spec"]
    ai["nodeSelector"] = {"feature.node.kubernetes.io/avx512": "true", "ib": "true",
                          "rack": "r1"}
    ai["activeDeadlineSeconds"] = 600
    ai["tolerations"] = [{"key": "hpc", "operator": "Exists"}]
    ai["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a", "b"]}]}]}}}
    m["spec"]["tasks"][1]["minAvailable"] = 2
    m["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "500m", "memory": "1.5Gi"}, "limits": {"cpu": "2"}}
    vj = parse_job(m, namespace="physics")
    s = vj.submission.spec
    assert (s.account, s.partitions, s.qos, s.time_limit_s) == ("physics", ("gpu",), "high",
                                                                  600)
    g = s.task_groups[1]
    assert (g.cpus_per_task, g.mem_per_task_mb, g.min_available) == (2, 1536, 2)
    assert g.constraint == "avx512&ib&rack=r1&(zone=a|zone=b)"
    assert vj.submission.extra["vc_ttl_s"] == "60"
    plan = vj.plan
    assert plan["max_retry"] == 2 and plan["plugins"] == ["env", "svc"]
    assert plan["policies"] == [{"events": ["PodFailed"], "exit_code": None,
                                 "action": "RestartJob"}]


def test_extended_resources_are_gres_per_replica() -> None:
    m = copy.deepcopy(CFD_AI)
    res = m["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]
    res["requests"]["example.com/fpga"] = 1
    res["limits"] = {"corral.dev/licence-x": "2"}
    g = parse_job(m).submission.spec.task_groups[0]
    assert g.gres == (("fpga", 1), ("licence-x", 2))
    out = export(parse_job(m).submission, 1)  # a Volcano job: its own manifest back
    _valid(out)
    sub = JobSubmission(spec=JobSpec(task_groups=(g,)), argv=("true",), dialect="slurm")
    rendered = export(sub, 2)["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    assert rendered["resources"]["requests"]["corral.dev/fpga"] == "1"
    _valid(export(sub, 2))


def test_minavailable_defaults_to_the_tasks_minimums() -> None:
    m = copy.deepcopy(CFD_AI)
    del m["spec"]["minAvailable"]
    m["spec"]["tasks"][0]["minAvailable"] = 1
    assert parse_job(m).submission.spec.min_available == 5


@pytest.mark.parametrize("change, path", [
    (lambda m: m["spec"].update(minSuccess=9), "spec.minSuccess"),
    (lambda m: m["spec"].update(bogus=1), "spec.bogus"),
    (lambda m: m["spec"]["tasks"][0]["template"]["spec"]["containers"][0].update(
        envFrom=[{"configMapRef": {"name": "x"}}]),
     "spec.tasks[0].template.spec.containers[0].envFrom"),
    (lambda m: m["spec"]["tasks"][0]["template"]["spec"].update(
        volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]),
     "spec.tasks[0].template.spec.volumes[0]"),
    (lambda m: m["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["resources"][
        "requests"].update({"ephemeral-storage": "1Gi"}),
     "spec.tasks[1].template.spec.containers[0].resources.requests.ephemeral-storage"),
    (lambda m: m["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["resources"][
        "requests"].update({"example.com/fpga": "500m"}),
     "spec.tasks[1].template.spec.containers[0].resources.requests.example.com/fpga"),
    (lambda m: m["spec"].update(plugins={"ssh": ["--ssh-key-file-path=/k"]}),
     "spec.plugins.ssh[0]"),
    (lambda m: m["spec"].update(plugins={"tensorflow": []}), "spec.plugins.tensorflow"),
    (lambda m: m["spec"].update(networkTopology={"mode": "hard", "highestTierAllowed": 2}),
     "spec.networkTopology.highestTierAllowed"),
    (lambda m: m["spec"].update(networkTopology={"mode": "soft", "highestTierAllowed": 1}),
     "spec.networkTopology.mode"),
    (lambda m: m["spec"]["tasks"][0].update(topologyPolicy="numa-please"),
     "spec.tasks[0].topologyPolicy"),
    (lambda m: m["spec"].update(policies=[{"event": "Unknown", "action": "AbortJob"}]),
     "spec.policies[0].events"),
    (lambda m: m["spec"]["tasks"][0]["template"]["spec"]["containers"][0].pop("command"),
     "spec.tasks[0].template.spec.containers[0].command"),
    (lambda m: m["spec"].update(minAvailable=9), "spec.minAvailable"),
    (lambda m: m["spec"]["tasks"][1].update(name="cfd-simulation"), "spec.tasks[1].name"),
    (lambda m: m["spec"].update(policies=[{"event": "PodFailed", "action": "Reboot"}]),
     "spec.policies[0].action"),
    (lambda m: m["spec"]["tasks"][0]["template"]["spec"].update(affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "k", "operator": "NotIn", "values": ["v"]}]}]}}}),
     "spec.tasks[0].template.spec.affinity.nodeAffinity."
     "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]."
     "matchExpressions[0].operator"),
    (lambda m: m["metadata"].update(name="Bad_Name"), "metadata.name"),
])
def test_what_corral_cannot_honour_is_refused_by_its_path(change: Any, path: str) -> None:
    m = copy.deepcopy(CFD_AI)
    change(m)
    with pytest.raises(ManifestError) as err:
        parse_job(m)
    assert path in [f for f, _r, _m in err.value.causes], err.value.causes


def test_depends_on_orders_the_tasks_and_refuses_cycles() -> None:
    m = copy.deepcopy(CFD_AI)
    m["spec"]["tasks"][0]["dependsOn"] = {"name": ["ai-training"]}
    vj = parse_job(m)
    assert [t["name"] for t in vj.plan["tasks"]] == ["ai-training", "cfd-simulation"]
    m["spec"]["tasks"][1]["dependsOn"] = {"name": ["cfd-simulation"]}
    with pytest.raises(ManifestError, match="cycle"):
        parse_job(m)
    m["spec"]["tasks"][1]["dependsOn"] = {"name": ["nosuch"], "iteration": "some"}
    with pytest.raises(ManifestError) as err:
        parse_job(m)
    assert [f for f, _r, _m in err.value.causes] == [
        "spec.tasks[1].dependsOn.iteration", "spec.tasks[1].dependsOn.name"]


def test_images_are_refused_where_host_commands_are_off() -> None:
    with pytest.raises(ManifestError, match="runs no images for Volcano jobs") as err:
        parse_job(CFD_AI, host_commands=False)
    assert [f for f, _r, _m in err.value.causes] == [
        f"spec.tasks[{i}].template.spec.containers[0].image" for i in (0, 1)]


def test_container_mode_runs_tasks_in_their_images() -> None:
    vj = parse_job(CFD_AI, images="container")
    assert [t["run_image"] for t in vj.plan["tasks"]] == [
        "docker://registry.chpc.edu.cn/hpc/openfoam:latest",
        "docker://registry.chpc.edu.cn/ai/pytorch:latest"]
    assert [t["image"] for t in vj.plan["tasks"]] == [  # as written, for the pods
        "registry.chpc.edu.cn/hpc/openfoam:latest", "registry.chpc.edu.cn/ai/pytorch:latest"]
    import copy

    exported = copy.deepcopy(CFD_AI)  # corral export's placeholder runs on the host
    exported["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["image"] = \
        "corral.dev/host"
    assert parse_job(exported, images="container").plan["tasks"][0]["run_image"] is None
    host = parse_job(CFD_AI)  # host mode: recorded only
    assert [t["run_image"] for t in host.plan["tasks"]] == [None, None]


def test_container_mode_checks_references_and_registries() -> None:
    import copy

    bad = copy.deepcopy(CFD_AI)
    bad["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["image"] = "Not/Valid"
    with pytest.raises(ManifestError) as err:
        parse_job(bad, images="container")
    assert [(f, m.split(":")[0]) for f, _r, m in err.value.causes] == [
        ("spec.tasks[1].template.spec.containers[0].image", "Invalid value")]
    with pytest.raises(ManifestError) as err:
        parse_job(CFD_AI, images="container", allowed_registries=("other.example:5000",))
    assert [(f, r) for f, r, _m in err.value.causes] == [
        (f"spec.tasks[{i}].template.spec.containers[0].image", "FieldValueForbidden")
        for i in (0, 1)]
    assert "registry.chpc.edu.cn is not allowed here" in err.value.causes[0][2]


def test_quantities() -> None:
    assert [quantity(q) for q in ("500m", "2", 3, "1Gi", "1e3", "1.5k")] == [
        0.5, 2.0, 3.0, 2.0**30, 1000.0, 1500.0]
    for bad in ("1x", "-1", True, "Gi"):
        with pytest.raises(ValueError):
            quantity(bad)


@pytest.mark.parametrize("policy", ["none", "best-effort", "restricted", "single-numa-node"])
def test_every_topology_policy_becomes_the_groups_numa_policy(policy: str) -> None:
    m = copy.deepcopy(CFD_AI)
    m["spec"]["tasks"][1]["topologyPolicy"] = policy
    vj = parse_job(m)
    groups = vj.submission.spec.task_groups
    assert [g.numa_policy for g in groups] == ["none", policy]
    assert [t["numa_policy"] for t in vj.plan["tasks"]] == ["none", policy]
    # stored and read back (the controller's JSON), and rendered back as the manifest
    again = JobSubmission.from_json(json.loads(json.dumps(vj.submission.to_json())))
    assert again.spec.task_groups == groups
    assert export(again, 3)["spec"]["tasks"][1]["topologyPolicy"] == policy
    # a Corral job of task groups (not from a manifest) renders its policy too
    native = JobSubmission(spec=JobSpec(name="g", task_groups=(
        TaskGroup("w", 2, 3, numa_policy=policy),)), argv=("true",), dialect="slurm")
    out = export(native, 4, "batch")
    _valid(out)
    assert out["spec"]["tasks"][0].get("topologyPolicy", "none") == policy


def test_late_replicas_keep_their_tasks_numa_policy() -> None:
    from corral.frontends.volcano_late import companion

    m = copy.deepcopy(CFD_AI)
    m["spec"]["tasks"][0]["topologyPolicy"] = "single-numa-node"
    vj = parse_job(m)
    wire = companion(vj.plan, {"cfd-simulation": [2, 3]}, "9", "/tmp", {})
    sub = JobSubmission.from_json(wire)
    assert [(g.name, g.replicas, g.numa_policy) for g in sub.spec.task_groups] == [
        ("cfd-simulation", 2, "single-numa-node")]


def test_a_volcano_job_exports_as_its_manifest_and_validates() -> None:
    vj = parse_job(CFD_AI)
    out = export(vj.submission, 7)
    assert out["spec"] == CFD_AI["spec"] and out["metadata"]["name"] == "cfd-ai-hybrid"
    _valid(out)


@pytest.mark.parametrize("spec, script", [
    (JobSpec(name="hello world", nodes_min=1, cpus_per_task=2, mem_per_node_mb=1024,
             time_limit_s=600, partitions=("batch",), qos="normal"), "#!/bin/sh\nhostname\n"),
    (JobSpec(name="mpi", nodes_min=4, ntasks_per_node=8, cpus_per_task=1, mem_per_cpu_mb=500,
             gpus_per_node=2, gpu_type="a100", constraint="avx512&ib", account="phys"),
     "#!/bin/bash\n#SBATCH -N 4\nsrun ./a.out\n"),
    (JobSpec(name="gang", task_groups=(TaskGroup("ps", 1, 2), TaskGroup("w", 4, 1, 100, 1,
                                                                        min_available=2)),
             min_available=3, constraint="(a|b)"), None),
])
def test_sbatch_jobs_export_as_volcano_jobs_that_validate(spec: JobSpec,
                                                          script: str | None) -> None:
    sub = JobSubmission(spec=spec, script=script, argv=("/bin/true",), workdir="/home/u",
                        dialect="slurm")
    out = export(sub, 42, "batch")
    _valid(out)
    json.dumps(out)
    assert out["metadata"]["name"].endswith("-42")
    if spec.nodes_min > 1:
        assert [t["replicas"] for t in out["spec"]["tasks"]] == [1, 3]
        res = out["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]
        assert res["requests"] == {"cpu": "8", "memory": "4000Mi", "nvidia.com/gpu": "2"}
        assert out["metadata"]["namespace"] == "phys"
    if spec.task_groups:
        assert out["spec"]["minAvailable"] == 3
        assert out["metadata"]["annotations"]["corral.dev/constraint"] == "(a|b)"


_KEYS = st.sampled_from(["name", "replicas", "command", "env", "resources", "requests", "cpu",
                         "value", "template", "spec", "containers", "policies", "event",
                         "nodeSelector", "affinity", "volumes", "minAvailable", "tasks",
                         "plugins", "metadata"])
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3)
    | st.sampled_from(["", "x", "1Gi", "500m", "true", "In", "PodFailed", "RestartJob"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=12)


def test_any_malformed_manifest_is_a_manifest_error() -> None:
    @settings(max_examples=150, deadline=None, derandomize=True)
    @given(path=st.sampled_from(["metadata", "spec", "spec.tasks", "task", "pod",
                                 "container", "resources"]), value=_json_values)
    def check(path: str, value: Any) -> None:
        m = copy.deepcopy(CFD_AI)
        t = m["spec"]["tasks"][0]
        where = {"metadata": (m, "metadata"), "spec": (m, "spec"),
                 "spec.tasks": (m["spec"], "tasks"), "task": (t, "template"),
                 "pod": (t["template"], "spec"),
                 "container": (t["template"]["spec"]["containers"], 0),
                 "resources": (t["template"]["spec"]["containers"][0], "resources")}
        obj, key = where[path]
        obj[key] = value  # type: ignore[index]
        try:
            parse_job(m)
        except ManifestError:
            pass

    check()


def test_fields_real_volcano_accepts_are_honoured() -> None:
    """The ssh plugin (and the plugin flags that hold on hosts), networkTopology hard
    under one leaf switch, topologyPolicy none, the TaskFailed event."""
    m = copy.deepcopy(CFD_AI)
    m["spec"]["plugins"] = {"ssh": ["--no-root"], "svc": ["--publish-not-ready-addresses",
                                                          "--disable-network-policy=true"],
                            "env": []}
    m["spec"]["networkTopology"] = {"mode": "hard", "highestTierAllowed": 1}
    m["spec"]["tasks"][0]["topologyPolicy"] = "none"
    m["spec"]["tasks"][1]["topologyPolicy"] = "best-effort"
    m["spec"]["policies"] = [{"event": "TaskFailed", "action": "AbortJob"}]
    vj = parse_job(m)
    assert vj.plan["plugins"] == ["env", "ssh", "svc"]
    assert vj.submission.spec.switches == 1
    # soft: as few switches as the free nodes allow, which topology placement does
    m["spec"]["networkTopology"] = {"mode": "soft", "highestTierAllowed": 2}
    soft = parse_job(m, topology_placement=True)
    assert soft.submission.spec.switches is None
    with pytest.raises(ManifestError) as err:
        parse_job(m)  # a cluster that does not place by switches refuses it, saying why
    assert any("placement" in str(c) for c in err.value.causes), err.value.causes
    assert vj.plan["policies"][0]["events"] == ["TaskFailed"]


def test_an_image_task_may_leave_the_command_to_its_image() -> None:
    """In an image (``volcano_images = "container"``) ``command`` and ``args`` are
    Kubernetes': either or both may be missing (the image's ENTRYPOINT/CMD run); on the
    host a command is required, and the message says why."""
    m = copy.deepcopy(CFD_AI)
    ct = m["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    ct.pop("command")
    ct["args"] = ["-parallel"]
    ct["workingDir"] = "/workspace"  # only inside the image
    vj = parse_job(m, images="container")
    t = vj.plan["tasks"][0]
    assert (t["command"], t["args"], t["argv"], t["workdir"]) == (
        [], ["-parallel"], ["-parallel"], "/workspace")
    assert vj.submission.workdir == ""  # not the job's directory: the user's home
    with pytest.raises(ManifestError) as err:
        parse_job(m)  # host mode
    assert err.value.causes == [(
        "spec.tasks[0].template.spec.containers[0].command", "FieldValueInvalid",
        "Required value: this cluster runs a task's command on the host, not in its image "
        "([controller] volcano_images = \"host\"), so the image's ENTRYPOINT/CMD cannot "
        "stand in for it")]
    ct.pop("image")
    with pytest.raises(ManifestError, match="a task without an image runs its command on "
                                            "the host"):
        parse_job(m, images="container")
    ct["image"] = "Not/Valid"  # one cause: the image's, not also the command's
    with pytest.raises(ManifestError) as err:
        parse_job(m, images="container")
    assert [f for f, _r, _m in err.value.causes] == [
        "spec.tasks[0].template.spec.containers[0].image"]
    ct["image"], ct["workingDir"] = "registry.chpc.edu.cn/hpc/openfoam:latest", "rel/dir"
    with pytest.raises(ManifestError, match=r"workingDir: Invalid value: 'rel/dir': an "
                                            "absolute path"):
        parse_job(m, images="container")


def test_an_image_tasks_working_directory_is_the_jobs_where_it_exists_here(
        tmp_path: Path) -> None:
    m = copy.deepcopy(CFD_AI)
    m["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["workingDir"] = str(tmp_path)
    assert parse_job(m, images="container").submission.workdir == str(tmp_path)


def _container_sub(spec: JobSpec, container: str) -> JobSubmission:
    return JobSubmission(spec=spec, script="#!/bin/sh\nsrun ./solve\n", workdir="/home/u",
                         dialect="slurm", extra={"container": container})


def test_an_exported_job_runs_in_its_own_image() -> None:
    from corral.containers.spec import ContainerSpec, Mount, parse_image

    spec = JobSpec(name="ctr", nodes_min=2, cpus_per_task=2)
    c = ContainerSpec(image=parse_image("docker://reg.example:5000/hpc/solver:2"),
                      mounts=(Mount("/data", "/data", True), Mount("/scratch/u", "/s")),
                      workdir="/work", entrypoint=True)
    out = export(_container_sub(spec, c.to_text()), 5)
    _valid(out)
    batch, worker = (t["template"]["spec"] for t in out["spec"]["tasks"])
    ct = batch["containers"][0]
    assert ct["image"] == "reg.example:5000/hpc/solver:2"
    assert ct["args"] == ["/bin/bash", "-c", "#!/bin/sh\nsrun ./solve\n"]
    assert "command" not in ct and ct["workingDir"] == "/work"
    assert batch["volumes"] == [{"name": "host-0", "hostPath": {"path": "/data"}}]
    assert ct["volumeMounts"] == [{"name": "host-0", "mountPath": "/data",
                                   "readOnly": True}]
    assert out["metadata"]["annotations"]["corral.dev/container-mounts"] == "/scratch/u:/s"
    wct = worker["containers"][0]  # the worker's own command, not after the ENTRYPOINT
    assert wct["image"] == ct["image"] and wct["command"][:2] == ["/bin/sh", "-c"]
    # Corral takes the export back: the task runs in that image
    again = parse_job(out | {"metadata": {"name": "ctr-again"}}, images="container")
    assert again.plan["tasks"][0]["run_image"] == "docker://reg.example:5000/hpc/solver:2"
    assert again.plan["tasks"][0]["command"] == []


def test_an_exported_host_job_has_no_image() -> None:
    from corral.containers.spec import ContainerSpec, parse_image

    spec = JobSpec(name="host", nodes_min=1)
    out = export(JobSubmission(spec=spec, script="#!/bin/sh\nhostname\n", dialect="slurm"),
                 6)
    _valid(out)
    ct = out["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    assert "image" not in ct and ct["command"][:2] == ["/bin/bash", "-c"]
    assert parse_job(out, images="container").plan["tasks"][0]["run_image"] is None
    sif = ContainerSpec(image=parse_image("/images/solver.sif"))  # no registry image
    out = export(_container_sub(spec, sif.to_text()), 7)
    assert "image" not in out["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    assert out["metadata"]["annotations"]["corral.dev/container-image"] == \
        "/images/solver.sif"
