"""``oci.conf`` (Slurm 22.05's container settings, next to slurm.conf) to ``[containers]``.

Slurm runs ``--container`` jobs by the command templates of ``oci.conf``; Corral drives the
runtime itself (``corral.agent.container``, ``corral.agent.apptainer``), so what maps is
*which* runtime: the program of ``RunTimeRun`` (or ``RunTimeCreate``/``RunTimeStart``)
when it is runc or crun gives ``[containers] runtime``; Apptainer's (or Singularity's, the
same CLI) gives ``runtime = "apptainer"`` and, written as an absolute path,
``[containers] apptainer``. The templates' other parts, the query/kill/delete commands and
the file locations are reported as unmapped with the reason (Corral's own way of doing
that step), so nothing is silently dropped.
"""

from __future__ import annotations

import shlex
from typing import Any

from corral.frontends.slurmconf_read import ConfLine, Unmapped

_RUN_KEYS = ("runtimerun", "runtimecreate", "runtimestart")
_REASONS = {
    "containerpath": "the container's bundle lives in the job's spool directory (a tmpfs "
                     "overlay over the node image cache): not configurable",
    "createenvfile": "the job's environment goes into the bundle's config.json",
    "runtimequery": "the agent runs the runtime in the foreground and waits for it",
    "runtimekill": "the supervisor signals the container's processes directly (they share "
                   "the host's PID namespace)",
    "runtimedelete": "the agent deletes the runtime's state when the job ends",
    "runtimeenvexclude": "the image's Env wins over the job's, except --container-env names",
    "mountspooldir": "the job's directories are bind mounted by the agent",
    "debugflags": "no runtime debug flags",
}


def _program(template: str) -> str:
    try:
        words = shlex.split(template)
    except ValueError:
        words = template.split()
    return words[0] if words else ""


def _runtime_of(template: str) -> str:
    """runc | crun | apptainer | "" from a command template such as
    ``runc --rootless=true run ...`` or ``apptainer exec --userns %r %@``."""
    prog = _program(template).rsplit("/", 1)[-1]
    if prog in ("apptainer", "singularity"):
        return "apptainer"
    return prog if prog in ("runc", "crun") else ""


def translate_oci_conf(lines: list[ConfLine], data: dict[str, Any],
                       unmapped: list[Any], notes: list[str]) -> None:
    """Add ``oci.conf``'s runtime to ``data["containers"]``; every other key to
    ``unmapped`` (``slurmconf_read.Unmapped``) with its reason."""

    runtime = ""
    program = ""
    for line in lines:
        for key, value in line.pairs:
            low = key.lower()
            if low in _RUN_KEYS:
                found = _runtime_of(value)
                if not found:
                    unmapped.append(Unmapped(line.where, key, value,
                                             "only runc, crun and apptainer run container "
                                             "jobs here"))
                    continue
                if runtime and found != runtime:
                    unmapped.append(Unmapped(line.where, key, value,
                                             f"a second runtime ({found}; {runtime} kept)"))
                    continue
                runtime = found
                if found == "apptainer":
                    if _program(value).startswith("/"):
                        program = _program(value)
                    notes.append(f"{line.where}: {key}: Apptainer runs .sif images and "
                                 "registry images; OCI bundles (--container) run with runc "
                                 "or crun")
                elif len(value.split()) > 1:
                    notes.append(f"{line.where}: {key}: only the program ({found}) is used; "
                                 "Corral chooses the runtime's options itself")
                continue
            unmapped.append(Unmapped(line.where, key, value,
                                     _REASONS.get(low, "no Corral equivalent")))
    if runtime:
        data.setdefault("containers", {})["runtime"] = runtime
    if program:
        data["containers"]["apptainer"] = program
