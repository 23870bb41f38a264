"""The supervisor's side of a container job: find the image (the node cache pulls it when
needed), then plan the container (``corral.agent.container``).

``prepare`` returns a ``Prepared`` (the plan, and an fd that pins the cached image for
the job's life) or raises ``PrepareError`` with the reason the job ends FAILED with:
a bad reference, a pull that failed, a runtime that is missing. None of these is the
node's fault: the node stays up.

Images by kind: ``docker`` from the cache (``corral.agent.images``); ``dir`` used in
place as the overlay's lower layer; ``bundle`` (Slurm's ``--container``): its
``config.json`` is read with the job user's credentials, its ``root.path`` is the lower
layer and its ``process.env`` the image environment; ``sif`` (srun steps: batch jobs run
SIFs with Apptainer, ``corral.agent.apptainer``): the sandbox Apptainer unpacked into the
node cache once is the lower layer.

A job given GPUs on this node gets its devices and the host's driver files in any of
these (``corral.agent.ocigpu``: device nodes and their cgroup rules in the spec, the
libraries and programs as read-only binds, the library directory on LD_LIBRARY_PATH).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corral.agent import aptenv, ocigpu
from corral.agent.container import ContainerPlan, plan, process_args
from corral.agent.images import ImageCache, ImageError
from corral.agent.launch import LaunchRequest
from corral.agent.runtimes import ContainerSettings
from corral.containers.spec import ContainerError, ContainerSpec, parse_mounts


class PrepareError(Exception):
    pass


@dataclass
class Prepared:
    plan: ContainerPlan
    pin_fd: int  # -1: nothing pinned
    digest: str
    pulled: bool  # the image was pulled for this job (a cold start)


def _read_as_user(path: str, uid: int, gid: int, groups: tuple[int, ...],
                  limit: int = 1 << 20) -> bytes:
    """The file's bytes, read by a child with the user's identity (root here must not
    read for a user what the user could not)."""
    r, w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            if os.geteuid() == 0:
                os.setgroups(list(groups))
                os.setgid(gid)
                os.setuid(uid)
            with open(path, "rb") as fh:
                os.write(w, fh.read(limit))
            code = 0
        except BaseException:  # noqa: B036 - any failure is "cannot read"
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise PrepareError(f"cannot read {path} as user {uid}")
    return b"".join(chunks)


def _bundle(path: str, uid: int, gid: int, groups: tuple[int, ...]
            ) -> tuple[str, dict[str, Any]]:
    try:
        cfg = json.loads(_read_as_user(os.path.join(path, "config.json"), uid, gid, groups))
    except ValueError as exc:
        raise PrepareError(f"OCI bundle {path}: bad config.json: {exc}") from None
    if not isinstance(cfg, dict):
        raise PrepareError(f"OCI bundle {path}: config.json is not an object")
    root = str((cfg.get("root") or {}).get("path") or "rootfs")
    lower = os.path.normpath(os.path.join(path, root))
    proc = cfg.get("process") or {}
    image_cfg = {"Env": [str(e) for e in proc.get("env") or []],
                 "WorkingDir": str(proc.get("cwd") or "/")}
    return lower, image_cfg


def prepare(spec: ContainerSpec, req: LaunchRequest, settings: ContainerSettings, *,
            jdir: str, node: str, step: str, command: list[str], env: dict[str, str],
            groups: tuple[int, ...], cgroup_rel: str | None, script: bool,
            progress: Callable[[str], None] | None = None,
            cancelled: Callable[[], bool] | None = None) -> Prepared:
    if not settings.runtime:
        raise PrepareError(f"no OCI runtime (runc or crun) on {node}: cannot run container "
                           "jobs here")
    if os.geteuid() != 0:
        raise PrepareError(f"the agent on {node} does not run as root: it cannot start "
                           "containers")
    named_dir, lock = "", -1
    if spec.name:  # a named container: kept for the job's later steps on this node
        named_dir, lock, spec = _named(spec, jdir, req.job_id)
    ref = spec.image
    pin = -1
    digest = ""
    pulled = False
    if ref.kind == "docker":
        cache = ImageCache(settings.cache_dir, settings.cache_max_mb,
                           insecure=settings.insecure, skopeo=settings.skopeo or "skopeo",
                           pull_timeout_s=settings.pull_timeout_s)
        try:
            image, pin = cache.acquire(ref, progress=progress, cancelled=cancelled)
        except ImageError as exc:
            raise PrepareError(f"image pull failed: {exc}") from None
        except OSError as exc:
            raise PrepareError(f"image cache {settings.cache_dir}: {exc}") from None
        lower, image_cfg, digest, pulled = image.rootfs, image.config, image.digest, \
            not image.cached
    elif ref.kind == "dir":
        lower, image_cfg = ref.canonical, {}
    elif ref.kind == "bundle":
        lower, image_cfg = _bundle(ref.canonical, req.uid, req.gid, groups)
    elif ref.kind == "sif":
        lower, image_cfg, digest, pulled, pin = _sif(ref.canonical, req, settings, groups,
                                                     progress)
    else:
        raise PrepareError(f"no container named {spec.name!r} in job {req.job_id}")
    try:
        defaults = tuple(m for text in settings.default_mounts for m in parse_mounts(text))
    except ContainerError as exc:
        raise PrepareError(f"[containers] default_mounts: {exc}") from None
    if not process_args(spec, image_cfg, command):
        if pin >= 0:
            os.close(pin)
        raise PrepareError(f"no command specified: the image {ref.canonical} has no "
                           "ENTRYPOINT or CMD, and none was given")
    gpu = None
    if req.gpus:  # the job's GPU devices and the driver's files (corral.agent.ocigpu)
        gpu = ocigpu.for_job(req.hidden_devices, sif=ref.kind == "sif")
        defaults += tuple(gpu.mounts)
    try:
        p = plan(spec, lower=lower, image_cfg=image_cfg, job_id=req.job_id,
                 restarts=req.restarts, step=step, node=node, jdir=jdir,
                 runtime=settings.runtime, state_root=settings.state_root, command=command,
                 env=env, workdir=req.workdir, user=req.user, uid=req.uid, gid=req.gid,
                 groups=groups or (req.gid,), cgroup_rel=cgroup_rel,
                 default_mounts=defaults, mount_home_default=settings.mount_home,
                 tmp_mb=settings.tmp_mb, script=script,
                 lower_is_users=ref.kind in ("dir", "bundle"))
    except OSError as exc:
        if pin >= 0:
            os.close(pin)
        raise PrepareError(f"cannot plan the container: {exc}") from None
    p.named_dir, p.named_lock = named_dir, lock
    if gpu is not None:
        ocigpu.inject(p.config, gpu)
        p.lib_path, p.warnings = gpu.lib_path, list(gpu.warnings)
    if ref.kind == "sif":
        p.sif, p.sif_run = ref.canonical, spec.entrypoint
        _sif_process(p, lower, spec)
    return Prepared(p, pin, digest, pulled)


def _sif(path: str, req: LaunchRequest, settings: ContainerSettings,
         groups: tuple[int, ...], progress: Callable[[str], None] | None
         ) -> tuple[str, dict[str, Any], str, bool, int]:
    """An srun step's SIF: its sandbox tree in the node cache (unpacked once by Apptainer,
    ``corral.agent.apptainer``) is the overlay's lower layer, as a registry image's is."""
    from corral.agent import apptainer

    if not settings.apptainer:
        raise PrepareError(f"{path} needs Apptainer to be unpacked, which this node does not "
                           "have ([containers] apptainer, or apptainer on PATH)")
    cache = ImageCache(settings.cache_dir, settings.cache_max_mb,
                       pull_timeout_s=settings.pull_timeout_s)
    try:
        fd = apptainer.open_as_user(path, req.uid, req.gid, groups or (req.gid,))
        try:
            if not os.fstat(fd).st_mode & 0o004:
                raise PrepareError(f"SIF image {path} is readable by its owner only: srun "
                                   "steps and named containers run SIFs from the node's "
                                   "shared cache (make it world-readable, or use it in a "
                                   "batch job without --container-name)")
            digest, lower, pulled = apptainer.sif_sandbox(cache, settings, path, fd, progress)
        finally:
            os.close(fd)
    except apptainer.AptError as exc:
        raise PrepareError(str(exc)) from None
    except OSError as exc:
        raise PrepareError(f"image cache {settings.cache_dir}: {exc}") from None
    pin = cache.pin(digest)
    cache.evict(keep=digest)
    return lower, {}, digest, pulled, pin


def _sif_process(p: ContainerPlan, lower: str, spec: ContainerSpec) -> None:
    """A SIF run by the OCI runtime (a named container's batch script): its process gets
    Apptainer's exec environment, as steps' tasks do (``corral.agent.aptenv``)."""
    proc = p.config["process"]
    env = dict(str(e).partition("=")[::2] for e in proc["env"])
    env = aptenv.step_env(env, p.sif, spec.env, "run" if spec.entrypoint else "exec")
    have_env = os.path.isdir(os.path.join(lower, aptenv.ENV_DIR.lstrip("/")))
    have_sh = os.path.lexists(os.path.join(lower, "bin", "sh"))
    proc["args"] = aptenv.step_argv(list(proc["args"]), runscript=spec.entrypoint,
                                    have_env=have_env, have_sh=have_sh)
    if not (have_env and have_sh):
        env = aptenv.strip_forced(env)
    proc["env"] = [f"{k}={v}" for k, v in env.items() if "\0" not in k + v]


def _named(spec: ContainerSpec, jdir: str, job_id: int) -> tuple[str, int, ContainerSpec]:
    """pyxis's ``--container-name``: the container's changes (its overlay's upper layer)
    live in ``<job dir>/named/<name>`` for the job's life on this node (the job directory
    goes when the job does); the first step that names it says its image, later ones with
    only the name run in it. One step at a time: a lock held while a step uses it."""
    import fcntl

    d = os.path.join(jdir, "named", spec.name or "")
    os.makedirs(d, mode=0o700, exist_ok=True)
    lock = os.open(os.path.join(d, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        raise PrepareError(f"container {spec.name!r} is in use by another step of job "
                           f"{job_id}") from None
    rec_path = os.path.join(d, "image.json")
    try:
        with open(rec_path) as fh:
            known = json.load(fh)
    except (OSError, ValueError):
        known = None
    if spec.image.kind == "named":
        if not known:
            os.close(lock)
            raise PrepareError(f"no container named {spec.name!r} in job {job_id} on this "
                               "node (give --container-image the first time)")
        try:
            image = ContainerSpec.from_json({**known, "name": spec.name}).image
        except ContainerError as exc:
            os.close(lock)
            raise PrepareError(f"container {spec.name!r}: {exc}") from None
        spec = spec.with_image(image)
    elif not known:
        with open(rec_path, "w") as fh:
            json.dump({"image": spec.image.canonical, "kind": spec.image.kind}, fh)
    elif known.get("image") != spec.image.canonical:
        os.close(lock)
        raise PrepareError(f"container {spec.name!r} of job {job_id} runs "
                           f"{known.get('image')}, not {spec.image.canonical}")
    return d, lock, spec


def cgroup_rel(dirs: dict[str, str], mounts: dict[str, str]) -> str | None:
    """The job cgroup's path relative to its hierarchy, from its directories and the
    mount point of each (``v2`` / ``tracking`` / a v1 controller)."""
    for key, path in dirs.items():
        base = mounts.get(key)
        if base and path.startswith(base.rstrip("/") + "/"):
            return path[len(base.rstrip("/")) + 1:]
    return None
