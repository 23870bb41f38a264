"""Container tools on this node, found once at agent start, and the settings every job's
supervisor gets for container jobs (``ContainerSettings``).

Found on ``PATH`` (plus ``/usr/sbin``, where Debian puts runc): ``runc``, ``crun``,
``skopeo`` (pulls), ``podman`` (reported) and ``apptainer`` (or the program at
``[containers] apptainer``: SIF images, ``corral.agent.apptainer``). What runs registry
images and directories: ``[containers] runtime`` (``auto``: runc, else crun, else
apptainer). crun is
only chosen where it can run on this cgroup layout (it refuses hybrid hosts whose cgroup2
still holds a controller, see ``../shared/platform/README.md``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any

from corral.containers.config import ContainersConfig

TOOLS = ("runc", "crun", "skopeo", "podman", "apptainer")
_EXTRA_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _version(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10,
                             stdin=subprocess.DEVNULL, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    first = out.strip().splitlines()[0] if out.strip() else ""
    return first[:120]


def discover(path: str | None = None, *, versions: bool = True) -> dict[str, dict[str, str]]:
    """``{tool: {"path", "version"}}`` of the container tools installed here (without
    ``versions``: paths only, no program started; the agent asks for the versions in the
    background, ``podman --version`` alone takes about 0.15 s)."""
    search = f"{path or os.environ.get('PATH', '')}:{_EXTRA_PATH}"
    out: dict[str, dict[str, str]] = {}
    for tool in TOOLS:
        found = shutil.which(tool, path=search)
        if found:
            out[tool] = {"path": found, "version": _version(found) if versions else ""}
    return out


def versions(tools: dict[str, dict[str, str]]) -> dict[str, str]:
    """``{tool: version}`` of the tools ``settings`` chose (the configured apptainer
    included); each program is started once."""
    return {k: _version(v["path"]) for k, v in tools.items()}


def _crun_usable() -> bool:
    """crun refuses hybrid hosts whose cgroup2 still offers a controller."""
    try:
        with open("/sys/fs/cgroup/unified/cgroup.controllers") as fh:
            return not fh.read().strip()
    except OSError:
        return True  # no hybrid cgroup2 mount: pure v1 or pure v2


@dataclass(frozen=True)
class ContainerSettings:
    """What a supervisor needs to run container jobs (JSON through the fork server)."""

    runtime: str = ""  # path of the OCI runtime ("" when there is none)
    apptainer: str = ""  # path of the apptainer program ("" when there is none)
    engine: str = "oci"  # what runs registry images and directories: oci | apptainer
    skopeo: str = ""
    cache_dir: str = ""
    cache_max_mb: int = 20480
    insecure: tuple[str, ...] = ()
    default_mounts: tuple[str, ...] = ()
    mount_home: bool = True
    tmp_mb: int = 1024
    pull_timeout_s: float = 900.0
    state_root: str = "/run/corral-runc"
    tools: dict[str, dict[str, str]] = field(default_factory=dict)

    def to_text(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @staticmethod
    def from_text(text: str) -> ContainerSettings:
        d: dict[str, Any] = json.loads(text) if text else {}
        for key in ("insecure", "default_mounts"):
            d[key] = tuple(d.get(key) or ())
        return ContainerSettings(**d)


def settings(cfg: ContainersConfig, state_dir: str, node: str,
             tools: dict[str, dict[str, str]] | None = None) -> ContainerSettings:
    """The supervisors' settings from ``[containers]`` and what is installed here."""
    found = dict(discover(versions=False) if tools is None else tools)
    if cfg.apptainer:  # configured: used even when another apptainer is on PATH
        found["apptainer"] = {"path": cfg.apptainer, "version": ""} \
            if os.access(cfg.apptainer, os.X_OK) else {}
        if not found["apptainer"]:
            del found["apptainer"]
    apptainer = found.get("apptainer", {}).get("path", "")
    runtime = ""
    choice = cfg.runtime
    if choice in ("runc", "crun"):
        runtime = found.get(choice, {}).get("path", "")
    elif "runc" in found:  # auto, apptainer: OCI bundles and srun steps still need one
        runtime = found["runc"]["path"]
    elif "crun" in found and _crun_usable():
        runtime = found["crun"]["path"]
    engine = "apptainer" if choice == "apptainer" or (choice == "auto" and not runtime
                                                       and apptainer) else "oci"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in node)
    # the runtime's state (container ids are node, job, run and step) is this agent's own:
    # two agent trees on one host with one node name (test clusters of two sessions) would
    # otherwise start, and delete, each other's containers
    tree = hashlib.sha1(os.path.abspath(state_dir).encode()).hexdigest()[:10]
    return ContainerSettings(
        runtime=runtime, apptainer=apptainer, engine=engine,
        skopeo=found.get("skopeo", {}).get("path", ""),
        cache_dir=cfg.cache_dir or os.path.join(state_dir, "images"),
        cache_max_mb=cfg.cache_max_mb, insecure=tuple(cfg.insecure_registries),
        default_mounts=tuple(cfg.default_mounts), mount_home=cfg.mount_home,
        tmp_mb=cfg.writable_tmp_mb, pull_timeout_s=cfg.pull_timeout_s,
        state_root=f"/run/corral-runc/{safe}-{tree}", tools=found)
