"""The container options of ``sbatch``/``srun``/``salloc`` (Slurm's ``--container`` and the
pyxis set) and of ``qsub`` and ``corral submit --image``, to a ``ContainerSpec``.

Each option is checked where it is applied (``HANDLERS``), so the first bad one fails with
``<prog>: error: <why>`` and exit status 1; ``finish`` combines them once all are applied
(the last value of each option wins, mounts accumulate as pyxis does) and stores the spec
in ``JobSubmission.extra["container"]``. Rules:

- ``--container=PATH`` (Slurm 22.05: an OCI bundle) and ``--container-image`` exclude
  each other;
- ``--container-mounts``, ``--container-workdir``, ``--container-env``, the writable and
  home options need an image (or a ``--container-name`` an earlier step of the job made);
- ``--container-save`` is refused (this cluster does not write squashfs images);
- ``--container-remap-root`` is accepted here and decided by the controller
  (``[containers] allow_remap_root``), which refuses the job otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral.containers.spec import (
    EXTRA_KEY,
    ContainerError,
    ContainerSpec,
    ImageRef,
    Mount,
    check_name,
    check_workdir,
    parse_bundle,
    parse_env_names,
    parse_image,
    parse_mounts,
)
from corral.frontends.context import SubmitContext


@dataclass
class ContainerDraft:
    """Container options of one call as applied so far (``None``: not given)."""

    bundle: ImageRef | None = None
    image: ImageRef | None = None
    mounts: list[Mount] = field(default_factory=list)
    workdir: str | None = None
    env: tuple[str, ...] | None = None
    name: str | None = None
    writable: bool | None = None
    mount_home: bool | None = None
    remap_root: bool | None = None
    entrypoint: bool | None = None
    image_workdir: bool | None = None

    @property
    def given(self) -> bool:
        return any(v not in (None, []) for v in (
            self.bundle, self.image, self.mounts, self.workdir, self.env, self.name,
            self.writable, self.mount_home, self.remap_root, self.entrypoint,
            self.image_workdir))


def _wrap(fn: Callable[[ContainerDraft, str, SubmitContext], None]
          ) -> Callable[[ContainerDraft, str | None, SubmitContext], None]:
    def handle(d: ContainerDraft, v: str | None, c: SubmitContext) -> None:
        try:
            fn(d, v or "", c)
        except ContainerError as exc:
            raise c.error(str(exc), 1) from None
    return handle


def _bundle(d: ContainerDraft, v: str, c: SubmitContext) -> None:
    d.bundle = parse_bundle(v, c.cwd)


def _image(d: ContainerDraft, v: str, c: SubmitContext) -> None:
    d.image = parse_image(v, c.cwd)


def _mounts(d: ContainerDraft, v: str, c: SubmitContext) -> None:
    d.mounts.extend(parse_mounts(v, c.cwd))


def _workdir(d: ContainerDraft, v: str, c: SubmitContext) -> None:
    d.workdir = check_workdir(v)


def _env(d: ContainerDraft, v: str, c: SubmitContext) -> None:
    d.env = parse_env_names(v)


def _name(d: ContainerDraft, v: str, c: SubmitContext) -> None:
    d.name = check_name(v)


def _save(d: ContainerDraft, v: str, c: SubmitContext) -> None:
    raise ContainerError("--container-save is not supported on this cluster (images are "
                         "read from the node image cache, never written back)")


def _flag(attr: str, value: bool) -> Callable[[ContainerDraft, str, SubmitContext], None]:
    def handle(d: ContainerDraft, v: str, c: SubmitContext) -> None:
        setattr(d, attr, value)
    return handle


HANDLERS: dict[str, Callable[[ContainerDraft, str | None, SubmitContext], None]] = {
    "container": _wrap(_bundle),
    "container_image": _wrap(_image),
    "container_mounts": _wrap(_mounts),
    "container_workdir": _wrap(_workdir),
    "container_env": _wrap(_env),
    "container_name": _wrap(_name),
    "container_save": _wrap(_save),
    "container_writable": _wrap(_flag("writable", True)),
    "container_readonly": _wrap(_flag("writable", False)),
    "container_mount_home": _wrap(_flag("mount_home", True)),
    "no_container_mount_home": _wrap(_flag("mount_home", False)),
    "container_remap_root": _wrap(_flag("remap_root", True)),
    "no_container_remap_root": _wrap(_flag("remap_root", False)),
    "container_entrypoint": _wrap(_flag("entrypoint", True)),
    "no_container_entrypoint": _wrap(_flag("entrypoint", False)),
    "container_image_workdir": _wrap(_flag("image_workdir", True)),
}


def build_spec(d: ContainerDraft, ctx: SubmitContext) -> ContainerSpec | None:
    """The spec of the applied options, None when no container was asked for."""
    if not d.given:
        return None
    if d.bundle is not None and d.image is not None:
        raise ctx.error("--container and --container-image are mutually exclusive", 1)
    image = d.bundle or d.image
    if image is None:
        if d.name is None:
            what = ("--container-mounts" if d.mounts else "--container-workdir" if d.workdir
                    else "--container-env" if d.env is not None else "a container option")
            raise ctx.error(f"{what} requires --container-image (or --container-name of a "
                            "container the job already made)", 1)
        image = ImageRef("named", "")  # resolved on the node from the job's named containers
    return ContainerSpec(
        image=image, mounts=tuple(d.mounts), workdir=d.workdir, env=d.env or (),
        name=d.name, writable=bool(d.writable), mount_home=d.mount_home is not False,
        remap_root=bool(d.remap_root), entrypoint=bool(d.entrypoint),
        image_workdir=bool(d.image_workdir))


def finish(d: ContainerDraft, ctx: SubmitContext, extra: dict[str, str]) -> None:
    """Put the spec of ``d`` (if any) into a submission's ``extra``."""
    spec = build_spec(d, ctx)
    if spec is not None:
        extra[EXTRA_KEY] = spec.to_text()


def spec_of(extra: dict[str, str]) -> ContainerSpec | None:
    """The container spec a submission (or launch) carries, None if it has none; raises
    ``ContainerError`` when the text is not a valid spec (it came over the wire)."""
    text = extra.get(EXTRA_KEY)
    if not text:
        return None
    return ContainerSpec.from_text(text)


def describe(spec: ContainerSpec) -> dict[str, Any]:
    return spec.to_json()
