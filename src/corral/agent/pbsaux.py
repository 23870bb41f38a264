"""PBS node files (``PBS_NODEFILE``) of jobs submitted with ``qsub``.

PBS writes each job's node file into ``$PBS_HOME/aux/<job id>``; Corral's agent does the
same in ``<agent state dir>/aux/<PBS_JOBID>``: the controller sends the file's text in the
launch request (``extra["pbs_nodefile"]``, each allocated host once per task slot), the
runner writes it before the job starts and points ``PBS_NODEFILE`` at it, and removes it
when the job is forgotten (its exit acknowledged).

The directory is mode 0711 and the files 0644: a job running as its submitting user can
read its own node file by name (the state directory of a root agent is 0711 as well) but
cannot list the others. Files are written to a temporary name and renamed, so a job never
reads a partial file.
"""

from __future__ import annotations

import dataclasses
import os

from corral.agent.launch import LaunchRequest

KEY = "pbs_nodefile"


def aux_dir(state_dir: str) -> str:
    path = os.path.join(state_dir, "aux")
    try:
        os.mkdir(path, 0o711)
    except FileExistsError:
        pass
    os.chmod(path, 0o711)
    return path


def _file_name(req: LaunchRequest) -> str:
    name = req.env.get("PBS_JOBID") or str(req.job_id)
    return name.replace("/", "_")


def write_nodefile(req: LaunchRequest, aux: str) -> LaunchRequest:
    """Write the node file of ``req`` (if it has one) and return the request with
    ``PBS_NODEFILE`` in its environment."""
    text = req.extra.get(KEY)
    if text is None:
        return req
    path = os.path.join(aux, _file_name(req))
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, text.encode())
        os.fchmod(fd, 0o644)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    env = dict(req.env)
    env["PBS_NODEFILE"] = path
    return dataclasses.replace(req, env=env)


def nodefile_of(request: dict[str, object]) -> str | None:
    """The node file named in a stored request (``request.json``), if any."""
    env = request.get("env")
    extra = request.get("extra")
    if isinstance(extra, dict) and KEY in extra and isinstance(env, dict):
        path = env.get("PBS_NODEFILE")
        return str(path) if path else None
    return None


def remove(path: str | None) -> None:
    if path:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
