"""A Volcano job's late companions run under the interpreter its launcher names
(``[controller] volcano_python``), not whatever the node's default is."""

from __future__ import annotations

import json

from corral.frontends import volcano_late
from corral.frontends.volcano import launcher_script


def _plan_of(script: str) -> dict[str, object]:
    body = script.split("<<'", 1)[1].split("\n", 1)[1].rsplit("\n", 2)[0]
    return dict(json.loads(body))


def test_late_companion_uses_the_plans_python() -> None:
    plan = {"namespace": "default", "job": "j", "tasks": [
        {"name": "w", "replicas": 2, "cpus": 1, "mem_mb": 100, "gpus": 0, "gpu_type": None,
         "constraint": None, "indices": [0, 1], "gres": {}}]}
    script = launcher_script(plan, "/opt/py/bin/python3")
    seen = _plan_of(script)
    assert seen["python"] == "/opt/py/bin/python3"
    sub = volcano_late.companion(seen, {"w": [1]}, "7", "/tmp", {},
                                 python=str(seen["python"]))
    assert "exec /opt/py/bin/python3 -m corral.frontends.volcano_run" in str(sub.get("script"))
