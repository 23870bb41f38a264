"""sbatch: the captured bad-input cases, output shapes and script reading."""

from __future__ import annotations

import pytest

from corral.shims.context import Context, NeedInput
from corral.shims.local import dispatch
from tests.shims.fakes import FakeClient, captured
from tests.shims.scenario import run

SCRIPT = "#!/bin/bash\n#SBATCH -J named\n#SBATCH -t 5\necho hi\n"


@pytest.mark.parametrize("name", [
    "err_sbatch_bad_option.txt", "err_sbatch_bad_time.txt", "err_sbatch_bad_time_2.txt",
    "err_sbatch_bad_array_spec.txt", "err_sbatch_bad_dependency_syntax.txt",
    "err_sbatch_missing_file.txt",
])
def test_bad_input_matches_capture(name: str) -> None:
    argv, expected, rc = captured(name)
    client = FakeClient()
    out, err, got = run("sbatch", argv, client)
    assert (out + err, got) == (expected, rc)
    assert client.submitted == []


def test_empty_stdin_and_no_shebang() -> None:
    _, expected, rc = captured("err_sbatch_no_script.txt")
    out, err, got = run("sbatch", [], FakeClient(), stdin="")
    assert (err, got) == (expected, rc)
    _, expected, rc = captured("err_sbatch_not_a_script.txt")
    out, err, got = run("sbatch", ["noshebang.sh"], FakeClient(), local=False,
                        files={"noshebang.sh": (True, "echo no shebang\n")})
    assert (err, got) == (expected, rc)


def test_outputs() -> None:
    client = FakeClient()
    files = {"job.sh": (True, SCRIPT)}
    out, err, rc = run("sbatch", ["job.sh"], client, local=False, files=files)
    assert (out, err, rc) == ("Submitted batch job 100\n", "", 0)
    out, err, rc = run("sbatch", ["--parsable", "job.sh"], client, local=False, files=files)
    assert out == "101\n"
    out, err, rc = run("sbatch", ["--quiet", "--wrap", "true"], client)
    assert (out, rc) == ("", 0)
    sub = client.submitted[0]
    assert sub["script"] == SCRIPT and sub["spec"]["name"] == "named"
    assert sub["spec"]["time_limit_s"] == 300 and sub["dialect"] == "slurm"
    assert client.submitted[2]["script"].startswith("#!/bin/sh\n# This script was created")


def test_script_is_requested_from_the_launcher() -> None:
    ctx = Context(prog="sbatch", argv=["-J", "x", "job.sh"], cwd="/tmp", env={}, uid=0,
                  now=0.0, local=False)
    with pytest.raises(NeedInput) as info:
        dispatch("sbatch", ctx, FakeClient())  # type: ignore[arg-type]
    assert info.value.paths == ["job.sh"]
    ctx = Context(prog="sbatch", argv=[], cwd="/tmp", env={}, uid=0, now=0.0, local=False)
    with pytest.raises(NeedInput) as info:
        dispatch("sbatch", ctx, FakeClient())  # type: ignore[arg-type]
    assert info.value.paths == ["-"]


def test_controller_refusal_prints_slurm_lines() -> None:
    from corral.client import CorralError

    class Refusing(FakeClient):
        def submit_result(self, sub):  # type: ignore[no-untyped-def]
            exc = CorralError("invalid", "invalid partition specified: nosuchpart", 400)
            exc.slurm = "Invalid partition name specified"  # type: ignore[attr-defined]
            raise exc

    argv, expected, rc = captured("err_sbatch_invalid_partition.txt")
    out, err, got = run("sbatch", argv, Refusing())
    assert (out + err, got) == (expected, rc)
