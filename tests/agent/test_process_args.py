"""What a container runs (``corral.agent.container.process_args``): Docker's rule, which
Kubernetes follows, behind ``--container-entrypoint``."""

from __future__ import annotations

from typing import Any

import pytest

from corral.agent.container import process_args
from corral.containers.spec import ContainerSpec, parse_image

IMG = parse_image("docker://reg.example/x:1")
CFG: dict[str, Any] = {"Entrypoint": ["/bin/ep", "-v"], "Cmd": ["serve", "--port=1"]}


@pytest.mark.parametrize("entrypoint, command, cfg, want", [
    (False, ["run", "me"], CFG, ["run", "me"]),  # a command replaces both (pod command)
    (True, ["a1"], CFG, ["/bin/ep", "-v", "a1"]),  # args replace CMD (pod args only)
    (True, [], CFG, ["/bin/ep", "-v", "serve", "--port=1"]),  # neither: ENTRYPOINT + CMD
    (True, [], {"Cmd": ["sh"]}, ["sh"]),  # no ENTRYPOINT: CMD alone
    (True, ["a1"], {"Cmd": ["sh"]}, ["a1"]),  # ... replaced by the args
    (True, [], {}, []),  # nothing to run: the node refuses the step
    (False, [], CFG, []),
])
def test_process_args(entrypoint: bool, command: list[str], cfg: dict[str, Any],
                      want: list[str]) -> None:
    assert process_args(ContainerSpec(image=IMG, entrypoint=entrypoint), cfg,
                        command) == want


def test_the_spec_carries_entrypoint_and_image_workdir() -> None:
    spec = ContainerSpec(image=IMG, entrypoint=True, image_workdir=True)
    back = ContainerSpec.from_text(spec.to_text())
    assert (back.entrypoint, back.image_workdir) == (True, True)
    assert ContainerSpec.from_json({"image": IMG.canonical}).image_workdir is False
