"""Apptainer's ``exec`` (and ``run``) environment for tasks that run on a SIF's sandbox
tree without Apptainer itself: the ``srun`` steps of a ``.sif`` image, whose tasks
``chroot`` into the tree the node cache holds (``corral.agent.stepd``).

Policy, as ``apptainer exec`` sets a container's environment up (checked against
Apptainer 1.4):

- the job's variables pass in (``SLURM_*`` included), except ``PATH``, which becomes the
  container's default (the host's is kept as ``USER_PATH``), and ``LD_LIBRARY_PATH``,
  which is dropped (the image's ``99-base.sh`` adds ``/.singularity.d/libs``, where the
  ``--nv`` driver libraries are bound);
- ``APPTAINER_CONTAINER``/``APPTAINER_NAME``/``APPTAINER_COMMAND``/``APPTAINER_ENVIRONMENT``
  and their ``SINGULARITY_*`` twins are set;
- every ``/.singularity.d/env/*.sh`` of the image is sourced in name order by the image's
  ``/bin/sh`` before the command (this is where the definition file's ``%environment``
  and a converted Docker image's ``ENV`` live);
- variables that must win over the image's scripts are applied after them: the host's
  ``APPTAINERENV_NAME`` (as ``NAME``) and the names given with ``--container-env`` (their
  job value), as Apptainer does for ``APPTAINERENV_``;
- with ``--container-entrypoint`` the image's ``%runscript`` (``/.singularity.d/runscript``)
  runs with the command as its arguments (``apptainer run``); otherwise the command runs
  (``apptainer exec``).

A tree without ``/.singularity.d/env`` or without ``/bin/sh`` gets the variables only
(there is nothing to source, or nothing to source it with).
"""

from __future__ import annotations

import os
import re

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ENV_DIR = "/.singularity.d/env"
RUNSCRIPT = "/.singularity.d/runscript"
_FORCE = "CORRAL_APT_FORCE"  # the names re-applied after the image's scripts
_SAVED = "CORRAL_APT_V_"  # ... and their values, under this prefix
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# sourced by the image's /bin/sh: the image's env scripts, then the forced names (valid
# shell names only, checked before, so the eval cannot run anything), then the command
_WRAPPER = (
    'for s in /.singularity.d/env/*.sh; do [ -f "$s" ] && . "$s"; done\n'
    'for n in $CORRAL_APT_FORCE; do eval "export $n=\\"\\${CORRAL_APT_V_$n}\\""; '
    'unset "CORRAL_APT_V_$n"; done\n'
    'unset CORRAL_APT_FORCE n s\n'
    'exec "$@"\n')


def step_env(env: dict[str, str], sif: str, keep: tuple[str, ...] = (),
             command: str = "exec") -> dict[str, str]:
    """The task's environment before the image's scripts run (see the module's policy);
    ``keep``: the ``--container-env`` names."""
    out = dict(env)
    host_path = out.pop("PATH", "")
    out.pop("LD_LIBRARY_PATH", None)
    out["PATH"] = DEFAULT_PATH
    if host_path:
        out["USER_PATH"] = host_path
    name = os.path.basename(sif)
    for prefix in ("APPTAINER", "SINGULARITY"):
        out[f"{prefix}_CONTAINER"] = sif
        out[f"{prefix}_NAME"] = name
        out[f"{prefix}_ENVIRONMENT"] = f"{ENV_DIR}/91-environment.sh"
    out["APPTAINER_COMMAND"] = command
    force: dict[str, str] = {}
    for key in [k for k in out if k.startswith("APPTAINERENV_")]:
        value = out.pop(key)
        var = key.removeprefix("APPTAINERENV_")
        if _NAME.match(var):
            force[var] = value
    for var in keep:
        if _NAME.match(var) and var in env:
            force[var] = env[var]
    if "PATH" in force:  # a forced PATH is the container's PATH from the start too
        out["PATH"] = force["PATH"]
    for var, value in force.items():
        out[var] = value  # also seen by the scripts, as Apptainer does
        out[_SAVED + var] = value
    if force:
        out[_FORCE] = " ".join(force)
    return out


def step_argv(argv: list[str], *, runscript: bool, have_env: bool,
              have_sh: bool) -> list[str]:
    """The task's command line: through ``/bin/sh`` sourcing the image's scripts when the
    tree has them and a shell, with the runscript in front for ``--container-entrypoint``."""
    args = [RUNSCRIPT, *argv] if runscript else list(argv)
    if not (have_env and have_sh):
        return args
    return ["/bin/sh", "-c", _WRAPPER, "sh", *args]


def strip_forced(env: dict[str, str]) -> dict[str, str]:
    """``env`` without the wrapper's bookkeeping (where no wrapper runs)."""
    return {k: v for k, v in env.items() if k != _FORCE and not k.startswith(_SAVED)}


def in_tree(argv: list[str], env: dict[str, str], *, runscript: bool) -> tuple[
        list[str], dict[str, str]]:
    """In a task already ``chroot``-ed into the tree: its command line and environment."""
    have_env = os.path.isdir(ENV_DIR)
    have_sh = os.path.exists("/bin/sh")
    out = step_argv(argv, runscript=runscript, have_env=have_env, have_sh=have_sh)
    return out, env if (have_env and have_sh) else strip_forced(env)
