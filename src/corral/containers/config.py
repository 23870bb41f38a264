"""``[containers]`` of ``corral.toml``: the container runtime and image cache of the nodes,
and the controller's policy for container jobs (docs/containers.md).

The controller uses ``allowed_registries`` and ``allow_remap_root`` to refuse jobs at
submit; the agents use the rest (which runtime, where the image cache lives and how large
it may grow, which registries are plain HTTP, what every container mounts).
"""

from __future__ import annotations

from dataclasses import dataclass

RUNTIMES = ("auto", "runc", "crun", "apptainer")


@dataclass(frozen=True, slots=True)
class ContainersConfig:
    enabled: bool = True  # false: container jobs are refused at submit
    # what runs registry images and directories: auto (runc, else crun, else apptainer),
    # runc, crun, apptainer (SIF images always need apptainer)
    runtime: str = "auto"
    # the apptainer program (a real one, or scripts/apptainer-sid on Debian 12); default:
    # apptainer on PATH
    apptainer: str | None = None
    cache_dir: str | None = None  # node image cache; default <agent state dir>/images
    cache_max_mb: int = 20480  # LRU eviction above this (images in use are kept)
    # registries images may come from (host[:port]); empty: any
    allowed_registries: tuple[str, ...] = ()
    # registries reached over plain HTTP / without TLS verification (a local registry)
    insecure_registries: tuple[str, ...] = ()
    # mounts every container gets, pyxis syntax SRC[:DST[:FLAGS]]
    default_mounts: tuple[str, ...] = ()
    mount_home: bool = True  # the user's home directory is mounted unless the job says no
    allow_remap_root: bool = False  # --container-remap-root (a user namespace; no privilege)
    pull_timeout_s: float = 900.0  # a pull that takes longer fails the job
    writable_tmp_mb: int = 1024  # size of the tmpfs behind a --container-writable root
    # early pulls (corral.controller.prefetch): a pending job's image is pulled on the
    # nodes it is planned on when its planned start is at most prefetch_horizon_s away,
    # at most prefetch_per_node such pulls at once on a node
    prefetch: bool = True
    prefetch_horizon_s: float = 1800.0
    prefetch_per_node: int = 2


def check(cfg: ContainersConfig) -> list[tuple[str, str]]:
    """(key, problem) for every bad setting; empty when all are good."""
    from corral.containers.spec import ContainerError, parse_mounts

    out: list[tuple[str, str]] = []
    if cfg.runtime not in RUNTIMES:
        out.append(("runtime", f"must be one of {', '.join(RUNTIMES)}, got {cfg.runtime!r}"))
    if cfg.cache_max_mb < 0:
        out.append(("cache_max_mb", "must not be negative"))
    if cfg.cache_dir is not None and not cfg.cache_dir.startswith("/"):
        out.append(("cache_dir", f"must be an absolute path, got {cfg.cache_dir!r}"))
    if cfg.apptainer is not None and not cfg.apptainer.startswith("/"):
        out.append(("apptainer", f"must be an absolute path, got {cfg.apptainer!r}"))
    if cfg.pull_timeout_s <= 0:
        out.append(("pull_timeout_s", "must be positive"))
    if cfg.prefetch_horizon_s < 0:
        out.append(("prefetch_horizon_s", "must not be negative"))
    if cfg.prefetch_per_node < 1:
        out.append(("prefetch_per_node", "must be at least 1 (prefetch = false turns early "
                                         "pulls off)"))
    if cfg.writable_tmp_mb < 1:
        out.append(("writable_tmp_mb", "must be at least 1"))
    for key in ("allowed_registries", "insecure_registries"):
        for host in getattr(cfg, key):
            if not host or "/" in host or " " in host:
                out.append((key, f"bad registry {host!r} (host[:port])"))
    for m in cfg.default_mounts:
        try:
            parse_mounts(m)
        except ContainerError as exc:
            out.append(("default_mounts", str(exc)))
    return out
