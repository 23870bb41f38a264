"""PBS node files written by the agent (``corral.agent.pbsaux``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from corral.agent import pbsaux
from corral.agent.launch import LaunchRequest


def test_write_and_remove(tmp_path: Path) -> None:
    aux = pbsaux.aux_dir(str(tmp_path))
    assert stat.S_IMODE(os.stat(aux).st_mode) == 0o711
    plain = LaunchRequest(job_id=3, name="x", user="u", uid=0, gid=0, workdir="/")
    assert pbsaux.write_nodefile(plain, aux) is plain  # not a qsub job: nothing written
    req = LaunchRequest(job_id=4, name="x", user="u", uid=0, gid=0, workdir="/",
                        env={"PBS_JOBID": "4.srv"}, extra={pbsaux.KEY: "n1\nn1\n"})
    out = pbsaux.write_nodefile(req, aux)
    path = out.env["PBS_NODEFILE"]
    assert path == os.path.join(aux, "4.srv") and Path(path).read_text() == "n1\nn1\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert os.listdir(aux) == ["4.srv"]  # no temporary file left behind
    # an agent restarted on the same state dir finds it again from the stored request
    assert pbsaux.nodefile_of(out.to_json()) == path
    assert pbsaux.nodefile_of(plain.to_json()) is None
    pbsaux.remove(path)
    pbsaux.remove(path)  # twice is fine
    assert not os.path.exists(path)
