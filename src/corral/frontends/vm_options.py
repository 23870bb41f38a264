"""``--vm[=IMAGE]`` of ``sbatch``/``corral submit`` (and ``#SBATCH --vm``): run the job in
a virtual machine (``docs/vms.md``).

``--vm`` alone boots the default image; ``--vm=NAME`` an image of the nodes' cache;
``--vm=/path/disk.qcow2`` a disk of the user's own where the cluster allows it. The value
is checked here (``corral.vmimage.manifest.check_name``); a bad one fails as sbatch fails
for a bad option value (``sbatch: error: ...``, exit 1). The result lands in
``JobSubmission.extra["vm_image"]`` (the agent boots it) and ``JobSpec.runtime = "vm"``
(the scheduler places it: ``corral.core.runtime``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from corral.vmimage.manifest import ImageError, check_name

if TYPE_CHECKING:
    from corral.frontends.context import SubmitContext


class WithExtras(Protocol):
    """What ``--vm`` writes into: the options' extras (``slurm_handlers.SlurmOptions``)."""

    extra: dict[str, str]

KEY = "vm_image"


def handle_vm(opts: WithExtras, value: str | None, ctx: SubmitContext) -> None:
    try:
        opts.extra[KEY] = check_name(value or "")
    except ImageError as exc:
        raise ctx.error(f"Invalid --vm specification: {exc}", 1) from None


def runtime_of(extra: dict[str, str]) -> str:
    """The runtime class a submission's extras ask for (``container``: issue 13's
    ``--container-image``, ``extra["container"]``)."""
    if KEY in extra:
        return "vm"
    return "container" if "container" in extra else "host"
