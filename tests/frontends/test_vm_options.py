"""``sbatch --vm[=IMAGE]`` / ``#SBATCH --vm``: the runtime class and the image."""

from __future__ import annotations

import pytest

from corral.frontends.context import local_context
from corral.frontends.errors import SubmitError
from corral.frontends.slurm_options import parse_sbatch


def sub(argv: list[str]):  # type: ignore[no-untyped-def]
    return parse_sbatch(argv, local_context("sbatch")).submission


def test_vm_flag_default_and_named_image() -> None:
    s = sub(["--vm", "--wrap", "uname -r"])
    assert s.spec.runtime == "vm" and s.extra["vm_image"] == ""
    s = sub(["--vm=debian12", "--wrap", "true"])
    assert s.spec.runtime == "vm" and s.extra["vm_image"] == "debian12"
    s = sub(["--wrap", "true"])
    assert s.spec.runtime == "host" and "vm_image" not in s.extra


def test_vm_directive_in_the_script(tmp_path) -> None:  # type: ignore[no-untyped-def]
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --vm=img-1\n#SBATCH -c 2\nuname -r\n")
    s = sub([str(script)])
    assert s.spec.runtime == "vm" and s.extra["vm_image"] == "img-1"
    assert s.spec.cpus_per_task == 2


@pytest.mark.parametrize("value", ["../etc", "a b", "/tmp/disk.img", "x" * 80])
def test_bad_vm_values_fail_like_sbatch(value: str) -> None:
    with pytest.raises(SubmitError) as err:
        sub([f"--vm={value}", "--wrap", "true"])
    assert err.value.exit_code == 1
    assert err.value.message.startswith("sbatch: error: Invalid --vm specification")


def test_qcow2_path_is_accepted_by_the_front_end() -> None:
    s = sub(["--vm=/srv/images/ubuntu.qcow2", "--wrap", "true"])
    assert s.extra["vm_image"] == "/srv/images/ubuntu.qcow2"
