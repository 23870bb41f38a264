"""Volcano Job manifests (``batch.volcano.sh/v1alpha1`` ``Job``) to a ``JobSubmission``.

``parse_job(manifest, ...)`` checks a manifest field by field and returns a ``VolcanoJob``:
the submission (one task group per Volcano task, ``minAvailable`` as the gang minimum)
and the normalized run plan the in-job launcher (``corral.frontends.volcano_run``) reads.
Every field is either honoured or refused with its path (``ManifestError``, rendered as
the API server's 422 ``Invalid`` status); nothing is silently dropped, except fields that
change nothing on a host (``tolerations``, ``ports``, ``imagePullPolicy``, labels and
annotations, probes are refused).

Mapping (docs/kubernetes.md has the table): ``metadata.namespace`` -> account
(``default``: the user's default account); ``spec.queue`` -> partition (``default``: the
default partition); ``priorityClassName`` -> QOS; each task -> a ``TaskGroup`` with
``replicas``, its ``minAvailable``, CPUs = the larger of the cpu request and limit rounded
up to whole CPUs, memory likewise in MB, ``nvidia.com/gpu`` -> GPUs per task,
other extended resources (``domain/name``) -> GRES ``name`` per replica (a task with GRES
runs one replica a node), ``nodeSelector`` / required node affinity -> the group's
feature constraint
(``feature.node.kubernetes.io/F: "true"`` and ``F: "true"`` -> feature ``F``; any other
``key: value`` -> feature ``key=value``; ``nvidia.com/gpu.product`` / ``gpu-type`` -> the
GPU type); ``activeDeadlineSeconds`` -> the time limit. Images (``[controller]
volcano_images``): ``"container"`` runs a task's replicas in its image (each replica a
step with ``--container-image``; the reference is checked here, and its registry against
``allowed_registries``; ``command`` and ``args`` may be left to the image's ENTRYPOINT and
CMD, which the node resolves, and ``workingDir`` is inside the image); ``"host"`` runs
``command``/``args`` on the host (``command`` required) and records the image only when
``host_commands`` (``[controller] volcano_host_commands``, default true), else refuses an
image. A task without an image runs its (required) command on the host in either mode.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any

from corral.core.model.job import JobSpec, TaskGroup
from corral.frontends import volcano_spec
from corral.submission import JobSubmission

API_VERSION = volcano_spec.API_VERSION
HOST_IMAGE = volcano_spec.HOST_IMAGE
KIND = "Job"
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
ACTIONS = ("RestartJob", "RestartTask", "RestartPod", "AbortJob", "TerminateJob",
           "CompleteJob")
EVENTS = ("PodFailed", "PodEvicted", "TaskCompleted", "TaskFailed", "*")
# launcher exit statuses (the job's exit code tells the phase apart)
EXIT_FAILED, EXIT_ABORTED, EXIT_TERMINATED = 1, 2, 3
_SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields",
               "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds")


class ManifestError(ValueError):
    """Fields of a manifest that Corral cannot take: [(path, reason, message)]."""

    def __init__(self, causes: list[tuple[str, str, str]], name: str = "") -> None:
        self.causes = causes
        self.name = name
        super().__init__("; ".join(f"{f}: {m}" for f, _r, m in causes))


@dataclass
class VolcanoJob:
    name: str
    namespace: str
    labels: dict[str, str]
    annotations: dict[str, str]
    submission: JobSubmission
    plan: dict[str, Any] = field(default_factory=dict)


class _Check:
    def __init__(self) -> None:
        self.causes: list[tuple[str, str, str]] = []

    def bad(self, path: str, message: str, reason: str = "FieldValueInvalid") -> None:
        self.causes.append((path, reason, message))

    def causes_at(self, path: str) -> bool:
        return any(f == path for f, _r, _m in self.causes)

    def unsupported(self, path: str, why: str = "") -> None:
        self.bad(path, "Forbidden: not supported by Corral" + (f" ({why})" if why else ""),
                 "FieldValueForbidden")

    def only(self, obj: dict[str, Any], path: str, known: tuple[str, ...],
             why: dict[str, str] | None = None) -> None:
        for key in obj:
            if key not in known:
                self.unsupported(f"{path}.{key}" if path else key, (why or {}).get(key, ""))

    def obj(self, v: Any, path: str) -> dict[str, Any]:
        if v is None:
            return {}
        if not isinstance(v, dict):
            self.bad(path, f"Invalid value: must be an object, not {type(v).__name__}")
            return {}
        return v

    def integer(self, v: Any, path: str, low: int = 0) -> int | None:
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            self.bad(path, f"Invalid value: {v!r}: must be an integer >= {low}")
            return None
        return v

    def strings(self, v: Any, path: str) -> list[str]:
        if v is None:
            return []
        if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
            self.bad(path, "Invalid value: must be a list of strings")
            return []
        return list(v)

    def string_map(self, v: Any, path: str) -> dict[str, str]:
        d = self.obj(v, path)
        for k, val in d.items():
            if not isinstance(val, str):
                self.bad(f"{path}.{k}", f"Invalid value: {val!r}: must be a string")
        return {str(k): str(val) for k, val in d.items()}


_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
           "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
           "m": 1e-3, "": 1}
_QTY = re.compile(r"^([+]?[0-9]+(?:\.[0-9]*)?|[+]?\.[0-9]+)(?:[eE]([+-]?[0-9]+))?"
                  r"(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$")


def quantity(v: Any) -> float:
    """A Kubernetes resource quantity (``500m``, ``2``, ``32Gi``, ``1e9``) as a number;
    ``ValueError`` when malformed."""
    if isinstance(v, bool):
        raise ValueError(f"{v!r} is not a quantity")
    if isinstance(v, (int, float)):
        if v < 0 or not math.isfinite(v):
            raise ValueError(f"{v!r} is not a quantity")
        return float(v)
    m = _QTY.match(str(v).strip())
    if not m:
        raise ValueError(f"{v!r} is not a quantity")
    num = float(m.group(1)) * (10 ** int(m.group(2)) if m.group(2) else 1)
    return num * _SUFFIX[m.group(3) or ""]


def _resources(c: _Check, res: dict[str, Any], path: str
               ) -> tuple[int, int, int, tuple[tuple[str, int], ...]]:
    """(cpus, mem_mb, gpus, GRES) of one container: the larger of request and limit; an
    extended resource ``domain/name`` is the GRES ``name``."""
    c.only(res, path, ("requests", "limits"))
    best: dict[str, float] = {}
    for part in ("requests", "limits"):
        for name, raw in c.obj(res.get(part), f"{path}.{part}").items():
            where = f"{path}.{part}.{name}"
            try:
                val = quantity(raw)
            except ValueError as exc:
                c.bad(where, f"Invalid value: {exc}")
                continue
            if name not in ("cpu", "memory", "nvidia.com/gpu") and "/" not in name:
                c.unsupported(where, "Corral takes cpu, memory, nvidia.com/gpu and extended "
                                     "resources (domain/name: the GRES name)")
                continue
            if "/" in name and name != "nvidia.com/gpu" and val != int(val):
                c.bad(where, "Invalid value: an extended resource is a whole number")
                continue
            best[name] = max(best.get(name, 0.0), val)
    cpus = max(1, math.ceil(best.get("cpu", 1.0) - 1e-9))
    mem_mb = math.ceil(best.get("memory", 0.0) / 2**20)
    gpus = best.get("nvidia.com/gpu", 0.0)
    if gpus != int(gpus):
        c.bad(f"{path}.requests.nvidia.com/gpu", "Invalid value: must be a whole number")
    gres = tuple(sorted((k.rsplit("/", 1)[1], int(v)) for k, v in best.items()
                        if "/" in k and k != "nvidia.com/gpu" and v))
    return cpus, mem_mb, int(gpus), gres


_GPU_KEYS = ("nvidia.com/gpu.product", "gpu-type")
_NFD = "feature.node.kubernetes.io/"


def selector_feature(key: str, value: str) -> str:
    """The Corral node feature a ``nodeSelector`` entry asks for."""
    if value == "true":
        return key[len(_NFD):] if key.startswith(_NFD) else key
    return f"{key}={value}"


def _selectors(c: _Check, pod: dict[str, Any], path: str) -> tuple[list[str], str | None]:
    """(constraint terms AND-ed, GPU type) from ``nodeSelector`` and node affinity."""
    terms: list[str] = []
    gpu_type: str | None = None
    for k, v in c.string_map(pod.get("nodeSelector"), f"{path}.nodeSelector").items():
        if k in _GPU_KEYS:
            gpu_type = v
        elif k == "kubernetes.io/os" and v == "linux":
            continue
        else:
            terms.append(selector_feature(k, v))
    aff = c.obj(pod.get("affinity"), f"{path}.affinity")
    c.only(aff, f"{path}.affinity", ("nodeAffinity",))
    na = c.obj(aff.get("nodeAffinity"), f"{path}.affinity.nodeAffinity")
    npath = f"{path}.affinity.nodeAffinity"
    c.only(na, npath, ("requiredDuringSchedulingIgnoredDuringExecution",),
           {"preferredDuringSchedulingIgnoredDuringExecution": "Corral has no soft "
            "placement preferences"})
    req = c.obj(na.get("requiredDuringSchedulingIgnoredDuringExecution"),
                f"{npath}.requiredDuringSchedulingIgnoredDuringExecution")
    rpath = f"{npath}.requiredDuringSchedulingIgnoredDuringExecution"
    c.only(req, rpath, ("nodeSelectorTerms",))
    alts: list[str] = []
    for ti, term in enumerate(req.get("nodeSelectorTerms") or []):
        tpath = f"{rpath}.nodeSelectorTerms[{ti}]"
        term = c.obj(term, tpath)
        c.only(term, tpath, ("matchExpressions",))
        ands: list[str] = []
        for ei, ex in enumerate(term.get("matchExpressions") or []):
            epath = f"{tpath}.matchExpressions[{ei}]"
            ex = c.obj(ex, epath)
            c.only(ex, epath, ("key", "operator", "values"))
            key, op = str(ex.get("key", "")), ex.get("operator")
            values = c.strings(ex.get("values"), f"{epath}.values")
            if op == "In" and values:
                ands.append("(" + "|".join(selector_feature(key, v) for v in values) + ")")
            elif op == "Exists" and not values:
                ands.append(selector_feature(key, "true"))
            else:
                c.unsupported(f"{epath}.operator", f"{op!r}: Corral node constraints have "
                                                   "In and Exists, no negation")
        if ands:
            alts.append("&".join(ands))
    if alts:
        terms.append("(" + "|".join(f"({a})" for a in alts) + ")" if len(alts) > 1
                     else alts[0])
    return terms, gpu_type


def _policies(c: _Check, raw: Any, path: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if raw is None:
        return out
    if not isinstance(raw, list):
        c.bad(path, "Invalid value: must be a list")
        return out
    for i, p in enumerate(raw):
        ppath = f"{path}[{i}]"
        p = c.obj(p, ppath)
        c.only(p, ppath, ("event", "events", "action", "exitCode"),
               {"timeout": "actions run at once"})
        events = ([p["event"]] if p.get("event") else []) + c.strings(p.get("events"),
                                                                    f"{ppath}.events")
        code = c.integer(p.get("exitCode"), f"{ppath}.exitCode", low=1)
        for e in events:
            if e not in EVENTS:
                c.unsupported(f"{ppath}.events", f"event {e!r}; Corral has "
                                                 f"{', '.join(EVENTS)}")
        if events and code is not None:
            c.bad(ppath, "Invalid value: give events or exitCode, not both")
        if not events and code is None:
            c.bad(ppath, "Required value: events or exitCode")
        action = p.get("action")
        if action not in ACTIONS:
            c.unsupported(f"{ppath}.action", f"{action!r}; Corral has {', '.join(ACTIONS)}")
        out.append({"events": events, "exit_code": code, "action": action})
    return out


_CONTAINER_OK = ("name", "image", "command", "args", "env", "resources", "workingDir",
                 "imagePullPolicy", "ports", "volumeMounts", "terminationMessagePath",
                 "terminationMessagePolicy")
_POD_OK = ("containers", "restartPolicy", "nodeSelector", "affinity", "tolerations",
           "activeDeadlineSeconds", "volumes", "schedulerName", "terminationGracePeriodSeconds",
           "dnsPolicy", "priorityClassName")


def _image(c: _Check, image: Any, path: str, images: str, host_commands: bool,
           allowed: tuple[str, ...]) -> str | None:
    """The canonical reference a task's replicas run in (None: on the host)."""
    from corral.containers.spec import ContainerError, parse_image

    if not image or image == HOST_IMAGE:  # an exported host job's placeholder: the host
        return None
    if not isinstance(image, str):
        c.bad(path, "Invalid value: must be a string")
        return None
    if images != "container":
        if not host_commands:
            c.unsupported(path, "this cluster runs no images for Volcano jobs ([controller] "
                                "volcano_images = \"host\", volcano_host_commands = false)")
        return None
    try:
        ref = parse_image(image)
    except ContainerError as exc:
        c.bad(path, f"Invalid value: {image!r}: {exc}")
        return None
    if ref.kind != "docker":
        c.bad(path, f"Invalid value: {image!r}: a registry image (name:tag or "
                    "host:port/name:tag)")
        return None
    if allowed and ref.registry not in allowed:
        c.bad(path, f"Forbidden: image registry {ref.registry} is not allowed here "
                    f"(allowed: {', '.join(allowed)})", "FieldValueForbidden")
        return None
    return ref.canonical


def _task(c: _Check, t: dict[str, Any], path: str, host_commands: bool,
          hostpaths: dict[str, str], images: str = "host",
          allowed: tuple[str, ...] = ()) -> dict[str, Any]:
    c.only(t, path, ("name", "replicas", "minAvailable", "template", "policies", "maxRetry",
                     "dependsOn", "topologyPolicy"),
           {"partitionPolicy": "no network-topology partitions"})
    numa_policy = volcano_spec.topology_policy(c, t.get("topologyPolicy"), path)
    name = t.get("name")
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > 63:
        c.bad(f"{path}.name", f"Invalid value: {name!r}: a task name is a DNS-1123 label")
        name = str(name)
    replicas = c.integer(t.get("replicas", 1), f"{path}.replicas", low=1) or 1
    tmin = c.integer(t.get("minAvailable"), f"{path}.minAvailable")
    if tmin is not None and tmin > replicas:
        c.bad(f"{path}.minAvailable", f"Invalid value: {tmin}: more than {replicas} replicas")
    tpl = c.obj(t.get("template"), f"{path}.template")
    c.only(tpl, f"{path}.template", ("metadata", "spec"))
    meta = c.obj(tpl.get("metadata"), f"{path}.template.metadata")
    c.only(meta, f"{path}.template.metadata", ("labels", "annotations", "name"))
    spath = f"{path}.template.spec"
    pod = c.obj(tpl.get("spec"), spath)
    c.only(pod, spath, _POD_OK, {
        "initContainers": "one host process per replica",
        "hostNetwork": "replicas are host processes already",
        "securityContext": "replicas run as the submitting user",
        "serviceAccountName": "no service accounts"})
    for vi, vol in enumerate(pod.get("volumes") or []):
        vpath = f"{spath}.volumes[{vi}]"
        vol = c.obj(vol, vpath)
        hp = c.obj(vol.get("hostPath"), f"{vpath}.hostPath")
        if set(vol) - {"name", "hostPath"} or "path" not in hp:
            c.unsupported(vpath, "only hostPath volumes (replicas see the host's files)")
        else:
            hostpaths[f"{name}/{vol.get('name')}"] = str(hp["path"])
    restart = pod.get("restartPolicy", "Never")
    if restart not in ("Never", "OnFailure"):
        c.unsupported(f"{spath}.restartPolicy", f"{restart!r}: batch replicas end")
    sched = pod.get("schedulerName")
    if sched not in (None, "volcano", "default-scheduler", "corral"):
        c.unsupported(f"{spath}.schedulerName", f"{sched!r}")
    deadline = c.integer(pod.get("activeDeadlineSeconds"), f"{spath}.activeDeadlineSeconds", 1)
    containers = pod.get("containers")
    if not isinstance(containers, list) or not containers:
        c.bad(f"{spath}.containers", "Required value: one container")
        containers = [{}]
    if len(containers) > 1:
        c.unsupported(f"{spath}.containers[1]", "one container (one process) per replica")
    cpath = f"{spath}.containers[0]"
    ct = c.obj(containers[0], cpath)
    c.only(ct, cpath, _CONTAINER_OK, {
        "stdin": "replicas have no terminal", "tty": "replicas have no terminal",
        "securityContext": "replicas run as the submitting user",
        "livenessProbe": "no probes", "readinessProbe": "no probes",
        "startupProbe": "no probes", "lifecycle": "no hooks", "envFrom": "no ConfigMaps"})
    image = ct.get("image")
    run_image = _image(c, image, f"{cpath}.image", images, host_commands, allowed)
    command = c.strings(ct.get("command"), f"{cpath}.command")
    args = c.strings(ct.get("args"), f"{cpath}.args")
    if not command and run_image is None and not c.causes_at(f"{cpath}.image"):
    
        c.bad(f"{cpath}.command", "Required value: this cluster runs a task's command on "
                                  "the host, not in its image ([controller] volcano_images "
                                  "= \"host\"), so the image's ENTRYPOINT/CMD cannot stand "
                                  "in for it" if image and image != HOST_IMAGE else
                                  "Required value: a task without an image runs its "
                                  "command on the host")
    workdir = ct.get("workingDir")
    if workdir is not None and (not isinstance(workdir, str) or not workdir.startswith("/")
                                or "\0" in workdir):
        c.bad(f"{cpath}.workingDir", f"Invalid value: {workdir!r}: an absolute path")
        workdir = None
    env: dict[str, str] = {}
    for ei, e in enumerate(ct.get("env") or []):
        epath = f"{cpath}.env[{ei}]"
        e = c.obj(e, epath)
        c.only(e, epath, ("name", "value"), {"valueFrom": "no ConfigMaps, Secrets or "
                                                          "field references"})
        ename = e.get("name")
        if not isinstance(ename, str) or not _ENV_NAME.match(ename):
            c.bad(f"{epath}.name", f"Invalid value: {ename!r}")
            continue
        env[ename] = str(e.get("value", ""))
    mounts: list[str] = []
    for mi, m in enumerate(ct.get("volumeMounts") or []):
        mpath = f"{cpath}.volumeMounts[{mi}]"
        m = c.obj(m, mpath)
        src = hostpaths.get(f"{name}/{m.get('name')}")
        if src is None or src.rstrip("/") != str(m.get("mountPath", "")).rstrip("/"):
            c.unsupported(mpath, "a mount must be a hostPath volume at its own path")
        elif m.get("readOnly"):
            mounts.append(f"{src}:{src}:ro")
        else:
            mounts.append(f"{src}:{src}")
    cpus, mem_mb, gpus, gres = _resources(c, c.obj(ct.get("resources"),
                                                   f"{cpath}.resources"), f"{cpath}.resources")
    terms, gpu_type = _selectors(c, pod, spath)
    pols = _policies(c, t.get("policies"), f"{path}.policies")
    if restart == "OnFailure":
        pols.append({"events": ["PodFailed"], "exit_code": None, "action": "RestartPod"})
    dep = c.obj(t.get("dependsOn"), f"{path}.dependsOn")
    c.only(dep, f"{path}.dependsOn", ("name", "iteration"))
    if dep.get("iteration", "all") not in ("all", "any"):
        c.bad(f"{path}.dependsOn.iteration", f"Unsupported value: {dep['iteration']!r}: "
                                             "supported values: \"all\", \"any\"")
    return {"name": name, "replicas": replicas, "min_available": tmin, "argv": command + args,
            "command": command, "args": args,
            "depends_on": c.strings(dep.get("name"), f"{path}.dependsOn.name"),
            "env": env, "workdir": workdir or None, "policies": pols,
            "max_retry": c.integer(t.get("maxRetry"), f"{path}.maxRetry"),
            "cpus": cpus, "mem_mb": mem_mb, "gpus": gpus, "gpu_type": gpu_type,
            "gres": [list(g) for g in gres],
            "constraint": "&".join(terms) or None, "deadline_s": deadline,
            "image": image, "container": str(ct.get("name") or name),
            "run_image": run_image, "mounts": mounts if run_image else [],
            "numa_policy": numa_policy}


def _start_order(c: _Check, tasks: list[dict[str, Any]], names: list[str]
                 ) -> list[dict[str, Any]]:
    """The tasks with every task after the tasks it ``dependsOn`` (Volcano creates a
    task's pods once those tasks' pods run; here they start in that order)."""
    for i, t in enumerate(tasks):
        for d in t["depends_on"]:
            if d not in names or d == t["name"]:
                c.bad(f"spec.tasks[{i}].dependsOn.name", f"Invalid value: {d!r}: not another "
                                                          "task of this job")
    done: list[dict[str, Any]] = []
    left = list(tasks)
    while left:
        ready = [t for t in left if all(d in {x["name"] for x in done} or d not in names
                                        for d in t["depends_on"])]
        if not ready:
            c.bad("spec.tasks", "Invalid value: dependsOn makes a cycle: "
                                + ", ".join(t["name"] for t in left))
            return tasks
        done.extend(ready)
        left = [t for t in left if t not in ready]
    return done


def parse_job(manifest: Any, *, namespace: str = "default", host_commands: bool = True,
              python: str = sys.executable, topology_placement: bool = False,
              images: str = "host", allowed_registries: tuple[str, ...] = ()) -> VolcanoJob:
    """Check ``manifest`` and build its submission; ``ManifestError`` lists every field
    Corral cannot take. ``namespace`` is the request path's (the manifest's must match);
    ``topology_placement``: the cluster places multi-node jobs by switches; ``images``:
    ``"container"`` (replicas run in their task's image, from ``allowed_registries``
    when that is not empty) or ``"host"`` (the image is recorded only)."""
    c = _Check()
    m = c.obj(manifest, "")
    if m.get("apiVersion") != API_VERSION or m.get("kind") != KIND:
        c.bad("apiVersion", f"Invalid value: {m.get('apiVersion')!r}/{m.get('kind')!r}: "
                            f"expected {API_VERSION} {KIND}")
    c.only(m, "", ("apiVersion", "kind", "metadata", "spec", "status"))
    meta = c.obj(m.get("metadata"), "metadata")
    c.only(meta, "metadata", ("name", "namespace", "labels", "annotations") + _SERVER_SET,
           {"generateName": "give the job a name", "ownerReferences": "no owners",
            "finalizers": "no finalizers"})
    name = meta.get("name")
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > 63:
        c.bad("metadata.name", f"Invalid value: {name!r}: a job name is a DNS-1123 label "
                               "(lower-case letters, digits, '-'; at most 63)")
        name = str(name or "")
    ns = meta.get("namespace") or namespace
    if ns != namespace:
        c.bad("metadata.namespace", f"Invalid value: {ns!r}: does not match the request's "
                                    f"namespace {namespace!r}")
    labels = c.string_map(meta.get("labels"), "metadata.labels")
    annotations = c.string_map(meta.get("annotations"), "metadata.annotations")
    spec = c.obj(m.get("spec"), "spec")
    c.only(spec, "spec", ("minAvailable", "tasks", "queue", "priorityClassName", "maxRetry",
                          "policies", "plugins", "ttlSecondsAfterFinished", "schedulerName",
                          "minSuccess", "networkTopology"),
           {"volumes": "no persistent volume claims",
            "runningEstimate": "give activeDeadlineSeconds for a time limit"})
    switches = volcano_spec.network_topology(c, spec.get("networkTopology"),
                                             topology_placement)
    sched = spec.get("schedulerName")
    if sched not in (None, "volcano", "corral"):
        c.unsupported("spec.schedulerName", f"{sched!r}: Corral is the scheduler")
    plugins = volcano_spec.plugins(c, spec.get("plugins"))
    raw_tasks = spec.get("tasks")
    if not isinstance(raw_tasks, list) or not raw_tasks:
        c.bad("spec.tasks", "Required value: at least one task")
        raw_tasks = []
    hostpaths: dict[str, str] = {}
    tasks = [_task(c, c.obj(t, f"spec.tasks[{i}]"), f"spec.tasks[{i}]", host_commands,
                   hostpaths, images, allowed_registries) for i, t in enumerate(raw_tasks)]
    names = [t["name"] for t in tasks]
    for i, n in enumerate(names):
        if n in names[:i]:
            c.bad(f"spec.tasks[{i}].name", f"Duplicate value: {n!r}")
    tasks = _start_order(c, tasks, names)
    total = sum(t["replicas"] for t in tasks)
    min_av = c.integer(spec.get("minAvailable"), "spec.minAvailable")
    if min_av is not None and total and not 1 <= min_av <= total:
        c.bad("spec.minAvailable", f"Invalid value: {min_av}: must be 1..{total} (the "
                                   "replicas of all tasks)")
    min_success = c.integer(spec.get("minSuccess"), "spec.minSuccess", low=1)
    if min_success is not None and total and min_success > total:
        c.bad("spec.minSuccess", f"Invalid value: {min_success}: more than the {total} "
                                 "replicas")
    max_retry = c.integer(spec.get("maxRetry"), "spec.maxRetry")
    ttl = c.integer(spec.get("ttlSecondsAfterFinished"), "spec.ttlSecondsAfterFinished")
    pols = _policies(c, spec.get("policies"), "spec.policies")
    for key in ("queue", "priorityClassName"):
        if spec.get(key) is not None and not isinstance(spec.get(key), str):
            c.bad(f"spec.{key}", "Invalid value: must be a string")
    if c.causes:
        raise ManifestError(c.causes, name)
    groups = tuple(TaskGroup(t["name"], t["replicas"], t["cpus"], t["mem_mb"], t["gpus"],
                             t["gpu_type"], t["min_available"], t["constraint"],
                             tuple((str(k), int(v)) for k, v in t["gres"]),
                             numa_policy=t["numa_policy"])
                   for t in tasks)
    if min_av is None:  # Volcano's default: the tasks' minimums (all replicas when unset)
        min_av = sum(t["replicas"] if t["min_available"] is None else t["min_available"]
                     for t in tasks) or 1
    queue = spec.get("queue") or "default"
    deadlines = [t["deadline_s"] for t in tasks if t["deadline_s"]]
    plan = {"job": name, "namespace": ns, "min_available": min_av, "min_success": min_success,
            "max_retry": 3 if max_retry is None else max_retry, "policies": pols,
            "plugins": sorted(plugins), "tasks": tasks, "queue": queue,
            "qos": spec.get("priorityClassName") or None,
            "time_limit_s": max(deadlines) if deadlines else None}
    js = JobSpec(name=name, account=None if ns == "default" else ns,
                 partitions=() if queue == "default" else (queue,),
                 qos=spec.get("priorityClassName") or None, task_groups=groups,
                 min_available=min_av, time_limit_s=max(deadlines) if deadlines else None,
                 requeue=False, switches=switches)
    # the job's directory (the replicas' logs, the host replicas' working directory): the
    # first host task's workingDir, else the first image task's that is a directory here
    # too (one only inside its image, such as /workspace, is no place for the job)
    workdir = next((t["workdir"] for t in tasks if t["workdir"] and not t["run_image"]),
                   None) or next((t["workdir"] for t in tasks if t["workdir"]
                                  and os.path.isdir(str(t["workdir"]))), None)
    extra = {"k8s_meta": json.dumps({"labels": labels, "annotations": annotations}),
             "vc_spec": json.dumps(spec, separators=(",", ":"))}
    if ttl is not None:
        extra["vc_ttl_s"] = str(ttl)
    sub = JobSubmission(spec=js, script=launcher_script(plan, python), workdir=workdir or "",
                        dialect="volcano", extra=extra)
    return VolcanoJob(name, ns, labels, annotations, sub, plan)


def launcher_script(plan: dict[str, Any], python: str) -> str:
    """The batch script of a Volcano job: the launcher with its plan on stdin."""
    # the plan names its interpreter, so late companions start under the same one
    body = json.dumps(dict(plan, python=python), indent=1, sort_keys=True)
    marker = "CORRAL_VCJOB_PLAN"
    while marker in body:
        marker += "_"
    return (f"#!/bin/sh\n# Volcano Job {plan['namespace']}/{plan['job']} (corral: one "
            f"process per replica)\nexec {shlex.quote(python)} -m corral.frontends.volcano_run"
            f" <<'{marker}'\n{body}\n{marker}\n")


def plan_of_script(script: str) -> dict[str, Any] | None:
    """The plan embedded by ``launcher_script`` (None for another script)."""
    start = script.find("\n{")
    end = script.rfind("\n}")
    if "corral.frontends.volcano_run" not in script or start < 0 or end < start:
        return None
    try:
        got = json.loads(script[start + 1:end + 2])
    except ValueError:
        return None
    return got if isinstance(got, dict) else None
