"""A Volcano job's late companions run under the interpreter its launcher names
(``[controller] volcano_python``), not whatever the node's default is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from corral.frontends import volcano_late
from corral.frontends.volcano import launcher_script


def _plan_of(script: str) -> dict[str, object]:
    body = script.split("<<'", 1)[1].split("\n", 1)[1].rsplit("\n", 2)[0]
    return dict(json.loads(body))


PLAN: dict[str, Any] = {"namespace": "default", "job": "j", "tasks": [
    {"name": "w", "replicas": 2, "cpus": 1, "mem_mb": 100, "gpus": 0, "gpu_type": None,
     "constraint": None, "indices": [0, 1], "gres": {}}]}


def test_late_companion_uses_the_plans_python() -> None:
    script = launcher_script(PLAN, "/opt/py/bin/python3")
    seen = _plan_of(script)
    assert seen["python"] == "/opt/py/bin/python3"
    sub = volcano_late.companion(seen, {"w": [1]}, "7", "/tmp", {},
                                 python=str(seen["python"]))
    assert "exec /opt/py/bin/python3 -m corral.frontends.volcano_run" in str(sub.get("script"))


def test_the_launcher_submits_late_replicas_under_the_plans_python(tmp_path: Path) -> None:
    from corral.frontends.volcano_run import Launcher

    plan = _plan_of(launcher_script(PLAN, "/opt/py/bin/python3"))
    env = {"CORRAL_SUBMIT_DIR": str(tmp_path), "CORRAL_JOB_ID": "7", "PATH": "/usr/bin:/bin"}
    launcher = Launcher(plan, env)  # no slot for any replica: all of them are late
    sent: list[dict[str, Any]] = []

    class _Api:
        def submit_result(self, sub: dict[str, Any]) -> dict[str, Any]:
            sent.append(sub)
            return {"job_ids": [8]}

    launcher._api = lambda: _Api()  # type: ignore[method-assign]
    launcher._submit_late()
    assert len(sent) == 1
    assert "exec /opt/py/bin/python3 -m corral.frontends.volcano_run" in str(sent[0]["script"])
