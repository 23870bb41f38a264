"""A job's container: the image reference and the options that say how it runs.

Image references (``parse_image``), checked at submit time for their form only (whether
the image exists is found out on the node, which ends the job with the reason):

=============================================  ==========================================
written                                        means
=============================================  ==========================================
``docker://[HOST[:PORT]/]NAME[:TAG][@DIGEST]``  an OCI/Docker image in a registry
``[HOST[:PORT]/]NAME[:TAG]`` (no scheme)       the same (pyxis/enroot and podman style)
``[REGISTRY#]NAME[:TAG]``                      enroot's URI form, ``nvcr.io#nvidia/cuda``
``/path/x.sif`` (or relative, ending ``.sif``)  an Apptainer/Singularity image file
``/path/dir`` (or ``./dir``)                    a root filesystem directory
``--container=/path`` (Slurm)                  an OCI bundle: ``config.json`` + rootfs
=============================================  ==========================================

A name without a registry is Docker Hub's (``docker.io``, ``library/`` for one-component
names), a missing tag is ``latest``: ``canonical`` is the fully spelled form the node cache
keys on. Credentials in a reference (enroot's ``USER@``) are refused: they would be stored
with the job. Relative paths are resolved against the submit directory.

``ContainerSpec`` holds the pyxis options too (mounts, working directory, environment
names, container name, writable, home mount, remap-root, entrypoint); ``to_text`` /
``from_text`` are its wire form (one JSON string in ``JobSubmission.extra["container"]``).
Everything here is pure (no file system access).
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass, field, replace
from typing import Any

KINDS = ("docker", "sif", "dir", "bundle", "named")
DEFAULT_REGISTRY = "docker.io"

_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_HOST = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9-]+)*"
                   r"(?::[0-9]{1,5})?$|^\[[0-9A-Fa-f:]+\](?::[0-9]{1,5})?$")
_MOUNT_FLAGS = frozenset({"ro", "rw", "bind", "rbind", "private", "rprivate", "slave",
                          "rslave", "shared", "rshared", "nosuid", "nodev", "noexec"})
MAX_REF_LEN = 1024
MAX_MOUNTS = 64


class ContainerError(ValueError):
    """A container option that cannot be used; the message says why (no prefix)."""


@dataclass(frozen=True)
class ImageRef:
    kind: str  # docker | sif | dir | bundle
    canonical: str  # docker://registry/repo:tag[@digest], or an absolute path
    registry: str = ""
    repository: str = ""
    tag: str = ""
    digest: str = ""

    @property
    def is_registry(self) -> bool:
        return self.kind == "docker"


def _docker(text: str, original: str) -> ImageRef:
    if not text:
        raise ContainerError(f"invalid image reference {original!r}: empty name")
    registry = ""
    rest = text
    if "#" in rest:  # enroot: REGISTRY#IMAGE
        registry, _, rest = rest.partition("#")
        if not registry:
            raise ContainerError(f"invalid image reference {original!r}: empty registry")
    else:
        first, slash, after = rest.partition("/")
        if slash and ("." in first or ":" in first or first == "localhost"
                      or first.startswith("[")):
            registry, rest = first, after
    if "@" in registry:
        raise ContainerError(f"invalid image reference {original!r}: credentials "
                             "(USER@) are not accepted in image references")
    if registry and not _HOST.match(registry):
        raise ContainerError(f"invalid image reference {original!r}: bad registry "
                             f"{registry!r}")
    digest = ""
    if "@" in rest:
        rest, _, digest = rest.partition("@")
        if not _DIGEST.match(digest):
            raise ContainerError(f"invalid image reference {original!r}: bad digest "
                                 f"{digest!r} (sha256:<64 hex digits>)")
    tag = ""
    last = rest.rsplit("/", 1)[-1]
    if ":" in last:
        rest, _, tag = rest.rpartition(":")
        if not _TAG.match(tag):
            raise ContainerError(f"invalid image reference {original!r}: bad tag {tag!r}")
    parts = rest.split("/")
    for p in parts:
        if not _COMPONENT.match(p):
            raise ContainerError(f"invalid image reference {original!r}: bad name "
                                 f"component {p!r} (lowercase letters, digits, '.', '_', '-')")
    registry = registry or DEFAULT_REGISTRY
    if registry in ("docker.io", "index.docker.io", "registry-1.docker.io") and len(parts) == 1:
        parts = ["library", *parts]
    if registry == "index.docker.io":
        registry = DEFAULT_REGISTRY
    repo = "/".join(parts)
    if not tag and not digest:
        tag = "latest"
    canonical = f"docker://{registry}/{repo}" + (f":{tag}" if tag else "") \
        + (f"@{digest}" if digest else "")
    return ImageRef("docker", canonical, registry, repo, tag, digest)


def _check_path(path: str, what: str) -> None:
    if "\0" in path or "\n" in path:
        raise ContainerError(f"invalid {what} path {path!r}")


def parse_image(text: str, cwd: str = "/") -> ImageRef:
    """The reference ``text`` (see the module table), or ``ContainerError``."""
    t = (text or "").strip()
    if not t:
        raise ContainerError("empty image reference")
    if len(t) > MAX_REF_LEN:
        raise ContainerError(f"image reference longer than {MAX_REF_LEN} characters")
    if t.startswith("docker://"):
        return _docker(t[len("docker://"):], t)
    scheme, sep, _ = t.partition("://")
    if sep and "/" not in scheme and "#" not in scheme:
        raise ContainerError(f"invalid image reference {t!r}: unsupported scheme "
                             f"{scheme + '://'!r} (docker://, a .sif file or a directory)")
    if t.startswith(("/", "./", "../", "~")) or t in (".", "..") \
            or t.endswith((".sif", ".sqsh", ".squashfs")):
        if t.startswith("~"):
            raise ContainerError(f"invalid image path {t!r}: '~' is not expanded; give "
                                 "an absolute path")
        _check_path(t, "image")
        path = posixpath.normpath(posixpath.join(cwd, t))
        if t.endswith((".sqsh", ".squashfs")):
            raise ContainerError(f"squashfs images ({t}) are not supported; use a "
                                 "docker:// reference, a .sif file or a directory")
        return ImageRef("sif" if path.endswith(".sif") else "dir", path)
    return _docker(t, t)


def parse_bundle(text: str, cwd: str = "/") -> ImageRef:
    """Slurm's ``--container=PATH``: an OCI bundle directory."""
    t = (text or "").strip()
    if not t:
        raise ContainerError("--container needs the path of an OCI bundle")
    _check_path(t, "bundle")
    return ImageRef("bundle", posixpath.normpath(posixpath.join(cwd, t)))


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    readonly: bool = False
    flags: tuple[str, ...] = ()  # the other flags as written (propagation, nosuid...)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "target": self.target, "readonly": self.readonly,
                "flags": list(self.flags)}


def _clean_abs(path: str, what: str, original: str) -> str:
    if not path.startswith("/"):
        raise ContainerError(f"invalid mount {original!r}: {what} {path!r} is not an "
                             "absolute path")
    if any(p == ".." for p in path.split("/")):
        raise ContainerError(f"invalid mount {original!r}: '..' in {what} {path!r}")
    _check_path(path, "mount")
    return posixpath.normpath(path)


def parse_mounts(text: str, cwd: str = "/") -> tuple[Mount, ...]:
    """pyxis ``--container-mounts=SRC[:DST[:FLAGS]][,...]``, flags joined by ``+``. A
    relative source is taken from the submit directory; the target must be absolute."""
    out: list[Mount] = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        parts = item.split(":")
        if len(parts) > 3:
            raise ContainerError(f"invalid mount {item!r}: SRC[:DST[:FLAGS]]")
        src = parts[0]
        if not src:
            raise ContainerError(f"invalid mount {item!r}: empty source")
        if not src.startswith("/"):
            src = posixpath.normpath(posixpath.join(cwd, src))
        src = _clean_abs(src, "source", item)
        dst = _clean_abs(parts[1], "target", item) if len(parts) > 1 and parts[1] else src
        if dst == "/":
            raise ContainerError(f"invalid mount {item!r}: cannot mount over /")
        flags = [f for f in (parts[2].split("+") if len(parts) > 2 else []) if f]
        bad = [f for f in flags if f not in _MOUNT_FLAGS]
        if bad:
            raise ContainerError(f"invalid mount {item!r}: unknown flag {bad[0]!r} "
                                 f"(allowed: {', '.join(sorted(_MOUNT_FLAGS))})")
        ro = "ro" in flags and "rw" not in flags
        out.append(Mount(src, dst, ro, tuple(f for f in flags if f not in ("ro", "rw"))))
    if len(out) > MAX_MOUNTS:
        raise ContainerError(f"more than {MAX_MOUNTS} container mounts")
    return tuple(out)


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_CTR_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def parse_env_names(text: str) -> tuple[str, ...]:
    """pyxis ``--container-env=NAME[,NAME...]``: variables whose host (job) value wins
    over the image's."""
    names = tuple(n.strip() for n in (text or "").split(",") if n.strip())
    for n in names:
        if not _ENV_NAME.match(n):
            raise ContainerError(f"invalid environment variable name {n!r} in --container-env")
    return names


def check_name(text: str) -> str:
    t = (text or "").strip()
    if not _CTR_NAME.match(t):
        raise ContainerError(f"invalid container name {text!r} (letters, digits, '_', '.', "
                             "'-'; at most 64)")
    return t


def check_workdir(text: str) -> str:
    t = (text or "").strip()
    if not t.startswith("/"):
        raise ContainerError(f"--container-workdir must be an absolute path, got {text!r}")
    _check_path(t, "working directory")
    return posixpath.normpath(t)


@dataclass(frozen=True)
class ContainerSpec:
    image: ImageRef
    mounts: tuple[Mount, ...] = ()
    workdir: str | None = None  # None: the submit (working) directory, as pyxis does
    env: tuple[str, ...] = ()  # host variables that override the image's
    name: str | None = None
    writable: bool = False  # pyxis/enroot default: read-only root filesystem
    mount_home: bool = True
    remap_root: bool = False
    # run the image's ENTRYPOINT before the command; with no command, ENTRYPOINT + CMD
    # (``docker run IMAGE`` without arguments; Kubernetes' container without command/args)
    entrypoint: bool = False
    # without ``workdir``: the image's WorkingDir (Kubernetes' default), not the submit
    # directory (pyxis')
    image_workdir: bool = False
    extra_flags: tuple[str, ...] = field(default_factory=tuple)  # accepted, not acted on

    def to_json(self) -> dict[str, Any]:
        return {"image": self.image.canonical, "kind": self.image.kind,
                "mounts": [m.to_json() for m in self.mounts], "workdir": self.workdir,
                "env": list(self.env), "name": self.name, "writable": self.writable,
                "mount_home": self.mount_home, "remap_root": self.remap_root,
                "entrypoint": self.entrypoint, "image_workdir": self.image_workdir}

    def to_text(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_json(data: dict[str, Any]) -> ContainerSpec:
        kind = str(data.get("kind", "docker"))
        image = str(data["image"])
        if kind == "named":  # a container an earlier step of the job made (by name)
            if not data.get("name"):
                raise ContainerError("a container without an image needs a name")
            ref = ImageRef("named", "")
        else:
            ref = parse_bundle(image) if kind == "bundle" else parse_image(image)
        if ref.kind != kind:
            raise ContainerError(f"image {image!r} is a {ref.kind}, not a {kind}")
        mounts = tuple(Mount(str(m["source"]), str(m["target"]), bool(m.get("readonly")),
                             tuple(str(f) for f in m.get("flags") or ()))
                       for m in data.get("mounts") or ())
        for m in mounts:  # the wire form is checked like the options
            _clean_abs(m.source, "source", m.source)
            _clean_abs(m.target, "target", m.target)
        wd = data.get("workdir")
        name = data.get("name")
        return ContainerSpec(
            image=ref, mounts=mounts, workdir=check_workdir(str(wd)) if wd else None,
            env=parse_env_names(",".join(str(e) for e in data.get("env") or ())),
            name=check_name(str(name)) if name else None,
            writable=bool(data.get("writable", False)),
            mount_home=bool(data.get("mount_home", True)),
            remap_root=bool(data.get("remap_root", False)),
            entrypoint=bool(data.get("entrypoint", False)),
            image_workdir=bool(data.get("image_workdir", False)))

    @staticmethod
    def from_text(text: str) -> ContainerSpec:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ContainerError(f"unreadable container specification: {exc}") from None
        if not isinstance(data, dict) or "image" not in data:
            raise ContainerError("container specification without an image")
        return ContainerSpec.from_json(data)

    def with_image(self, ref: ImageRef) -> ContainerSpec:
        return replace(self, image=ref)


EXTRA_KEY = "container"  # JobSubmission.extra / LaunchRequest.extra key of the spec text
