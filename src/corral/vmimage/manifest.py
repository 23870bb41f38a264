"""The image manifest (``manifest.json`` of an image directory) and how a job's ``--vm``
value names an image.

An image directory holds ``manifest.json``: ``{"format": "corral-vm/1", "name",
"kernel", "initrd", "disk", "cmdline", "kernel_version", "created", "modules"}``; file
names are relative to the directory. ``disk`` (optional) is a qcow2 or raw disk the guest
gets as its root (``/dev/vda``, opened read-only: writes go to a throw-away overlay).

What a job may name (``resolve``): ``""`` or ``"default"`` (the image ``default``), a
name (``[A-Za-z0-9._-]``, an image directory under the image cache), or, where the node
allows it (``[vm] allow_user_images``), an absolute path of a ``.qcow2`` disk, which
boots with the default image's kernel and init (the init mounts the disk as the job's
root filesystem: ``docs/vms.md``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass

FORMAT = "corral-vm/1"
MANIFEST = "manifest.json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class ImageError(ValueError):
    """The image named cannot be used."""


@dataclass(frozen=True)
class Manifest:
    name: str
    kernel: str
    initrd: str = ""
    disk: str = ""
    cmdline: str = ""
    kernel_version: str = ""
    created: float = 0.0
    modules: tuple[str, ...] = ()
    format: str = FORMAT


@dataclass(frozen=True)
class Image:
    """A resolved image: absolute paths of what qemu boots."""

    name: str
    kernel: str
    initrd: str
    disk: str
    cmdline: str


def write_manifest(directory: str, man: Manifest) -> None:
    data = asdict(man)
    data["modules"] = list(man.modules)
    with open(os.path.join(directory, MANIFEST), "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
        fh.write("\n")


def read_manifest(directory: str) -> Manifest:
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise ImageError(f"no VM image at {directory} (build one: corral image build-vm)") \
            from None
    except (OSError, ValueError) as exc:
        raise ImageError(f"unreadable manifest {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ImageError(f"{path} is not a {FORMAT} manifest")
    fields = set(Manifest.__dataclass_fields__)
    try:
        man = Manifest(**{k: v for k, v in data.items() if k in fields})
    except TypeError as exc:
        raise ImageError(f"bad manifest {path}: {exc}") from None
    for label, rel in (("kernel", man.kernel), ("initrd", man.initrd), ("disk", man.disk)):
        if rel and (os.path.isabs(rel) or ".." in rel.split("/")):
            raise ImageError(f"manifest {path}: {label} must be a file inside the image")
    if not man.kernel:
        raise ImageError(f"manifest {path} names no kernel")
    return Manifest(**{**asdict(man), "modules": tuple(man.modules)})


def check_name(value: str) -> str:
    """The ``--vm`` value as given at submit time, checked (``""`` is the default)."""
    if value in ("", "default"):
        return ""
    if value.startswith("/"):
        if not value.endswith(".qcow2") or "\n" in value or "," in value or len(value) > 4096:
            raise ImageError(f"a VM image path must be an absolute path of a .qcow2 file "
                             f"without commas, got {value!r}")
        return value
    if not _NAME.match(value):
        raise ImageError(f"bad VM image name {value!r} (letters, digits, '.', '_', '-')")
    return value


def resolve(value: str, image_dir: str, *, allow_paths: bool) -> Image:
    """What qemu boots for the job's ``--vm`` value on this node."""
    value = check_name(value)
    if value.startswith("/"):
        if not allow_paths:
            raise ImageError("this node runs only the images of its cache "
                             "([vm] allow_user_images = false)")
        base = _load(os.path.join(image_dir, "default"))
        return Image(value, base.kernel, base.initrd, value, base.cmdline)
    return _load(os.path.join(image_dir, value or "default"))


def _load(directory: str) -> Image:
    man = read_manifest(directory)

    def path(rel: str) -> str:
        return os.path.join(directory, rel) if rel else ""

    return Image(man.name, path(man.kernel), path(man.initrd), path(man.disk), man.cmdline)
