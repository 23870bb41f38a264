"""Container options: image references, pyxis/Slurm flags and #SBATCH lines for sbatch,
srun and salloc, qsub's -l container_image / -v CONTAINER_IMAGE, corral submit --image."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from corral.containers.spec import ContainerError, ContainerSpec, parse_image, parse_mounts
from corral.frontends.context import SubmitContext
from corral.frontends.errors import SubmitError
from corral.frontends.pbs_options import parse_qsub
from corral.frontends.slurm_handlers import SlurmOptions
from corral.frontends.slurm_options import (
    apply_options,
    build_submission,
    parse_sbatch,
    parse_slurm_args,
)

SCRIPT = "#!/bin/sh\nid\n"


def reader(text: str) -> Callable[[str], str]:
    return lambda path: text


def ctx(prog: str = "sbatch", script: str = SCRIPT) -> SubmitContext:
    return SubmitContext(prog=prog, cwd="/home/alice/work", env={"PATH": "/usr/bin"},
                         user="alice", uid=1000, gid=1000, read_file=reader(script))


def spec_of(argv: list[str], script: str = SCRIPT) -> dict[str, object]:
    sub = parse_sbatch(argv, ctx(script=script)).submission
    return json.loads(sub.extra["container"])  # type: ignore[no-any-return]


def err(argv: list[str], script: str = SCRIPT, prog: str = "sbatch") -> SubmitError:
    with pytest.raises(SubmitError) as exc:
        parse_sbatch(argv, ctx(prog, script))
    return exc.value


@pytest.mark.parametrize(("text", "canonical"), [
    ("busybox", "docker://docker.io/library/busybox:latest"),
    ("ubuntu:22.04", "docker://docker.io/library/ubuntu:22.04"),
    ("docker://127.0.0.1:5000/test/bb:1", "docker://127.0.0.1:5000/test/bb:1"),
    ("localhost/x/y", "docker://localhost/x/y:latest"),
    ("nvcr.io#nvidia/pytorch:23.10-py3", "docker://nvcr.io/nvidia/pytorch:23.10-py3"),
    ("index.docker.io/alpine", "docker://docker.io/library/alpine:latest"),
    ("r.io/a@sha256:" + "0" * 64, "docker://r.io/a@sha256:" + "0" * 64),
    ("[::1]:5000/a:b", "docker://[::1]:5000/a:b"),
])
def test_registry_references_are_canonical(text: str, canonical: str) -> None:
    ref = parse_image(text)
    assert (ref.kind, ref.canonical) == ("docker", canonical)


def test_paths_are_files_or_directories_from_the_submit_dir() -> None:
    assert parse_image("./img.sif", "/h/a") == parse_image("/h/a/img.sif")
    assert parse_image("/srv/images/x.sif").kind == "sif"
    assert parse_image("../rootfs", "/h/a").canonical == "/h/rootfs"
    assert parse_image("/srv/rootfs").kind == "dir"


@pytest.mark.parametrize(("text", "why"), [
    ("", "empty image reference"),
    ("Ubuntu", "bad name component 'Ubuntu'"),
    ("ubuntu:bad tag", "bad tag"),
    ("user@registry.io#img", "credentials"),
    ("bob@registry.io/img", "credentials"),
    ("docker://x@sha256:1234", "bad digest"),
    ("s3://bucket/x", "unsupported scheme 's3://'"),
    ("~/img.sif", "'~' is not expanded"),
    ("/srv/x.sqsh", "squashfs images"),
    ("bad_host!:5000/a", "bad registry"),
    ("x" * 2000, "longer than 1024"),
])
def test_bad_references_say_why(text: str, why: str) -> None:
    with pytest.raises(ContainerError, match=None) as exc:
        parse_image(text)
    assert why in str(exc.value)


def test_mounts_sources_targets_and_flags() -> None:
    ms = parse_mounts("/data:/data:ro,scratch,/a:/b:ro+nosuid", "/home/u")
    assert [(m.source, m.target, m.readonly, m.flags) for m in ms] == [
        ("/data", "/data", True, ()), ("/home/u/scratch", "/home/u/scratch", False, ()),
        ("/a", "/b", True, ("nosuid",))]
    for bad, why in (("/a:rel", "not an absolute path"), ("/a:/", "cannot mount over /"),
                     ("/a:/b:exec", "unknown flag 'exec'"), ("/a/../etc:/x", "'..'"),
                     ("/a:/b:ro:x", "SRC[:DST[:FLAGS]]")):
        with pytest.raises(ContainerError) as exc:
            parse_mounts(bad)
        assert why in str(exc.value)


def test_sbatch_pyxis_options_from_directives_and_flags() -> None:
    script = ("#!/bin/sh\n#SBATCH --container-image=127.0.0.1:5000/test/bb:1\n"
              "#SBATCH --container-mounts=/data:/data:ro\n#SBATCH --container-writable\nid\n")
    got = spec_of(["--container-mounts=/scratch", "--container-env=PATH,HOME",
                   "--no-container-mount-home", "--container-workdir=/data",
                   "--container-name=c1", "job.sh"], script)
    assert got["image"] == "docker://127.0.0.1:5000/test/bb:1"
    assert [m["target"] for m in got["mounts"]] == ["/data", "/scratch"]  # type: ignore[index]
    assert got["writable"] is True and got["mount_home"] is False
    assert got["env"] == ["PATH", "HOME"] and got["workdir"] == "/data"
    assert got["name"] == "c1" and got["remap_root"] is False
    # the command line wins over the script for single-valued options
    assert spec_of(["--container-readonly", "job.sh"], script)["writable"] is False


def test_slurm_container_is_an_oci_bundle() -> None:
    got = spec_of(["--container=bundles/b1", "job.sh"])
    assert (got["kind"], got["image"]) == ("bundle", "/home/alice/work/bundles/b1")
    sub = parse_sbatch(["job.sh"], ctx()).submission
    assert "container" not in sub.extra  # no container options: no container


@pytest.mark.parametrize(("argv", "message"), [
    (["--container-image=Bad", "job.sh"], "sbatch: error: invalid image reference 'Bad'"),
    (["--container=/b", "--container-image=busybox", "job.sh"],
     "sbatch: error: --container and --container-image are mutually exclusive"),
    (["--container-mounts=/a:/b", "job.sh"],
     "sbatch: error: --container-mounts requires --container-image"),
    (["--container-save=/x.sqsh", "--container-image=x", "job.sh"],
     "sbatch: error: --container-save is not supported"),
    (["--container-image=x", "--container-env=1BAD", "job.sh"],
     "sbatch: error: invalid environment variable name '1BAD'"),
    (["--container-image=x", "--container-workdir=rel", "job.sh"],
     "sbatch: error: --container-workdir must be an absolute path"),
    (["--container-image=x", "--container-name=a/b", "job.sh"],
     "sbatch: error: invalid container name 'a/b'"),
])
def test_sbatch_bad_container_options_exit_1(argv: list[str], message: str) -> None:
    e = err(argv)
    assert e.exit_code == 1
    assert str(e).startswith(message), str(e)


def test_bad_directive_value_fails_like_the_flag() -> None:
    e = err(["job.sh"], "#!/bin/sh\n#SBATCH --container-image=NOPE\nid\n")
    assert e.exit_code == 1 and "invalid image reference 'NOPE'" in str(e)


@pytest.mark.parametrize("prog", ["srun", "salloc"])
def test_srun_and_salloc_take_the_same_options(prog: str) -> None:
    c = ctx(prog)
    parsed, rest = parse_slurm_args(["--container-image=busybox", "--container-remap-root",
                                     "id"], c)
    opts = SlurmOptions()
    apply_options(opts, parsed, c, "cli")
    sub = build_submission(opts, c, script=None, argv=rest, interactive=True)
    spec = ContainerSpec.from_text(sub.extra["container"])
    assert spec.image.canonical == "docker://docker.io/library/busybox:latest"
    assert spec.remap_root is True  # accepted here; the controller decides
    with pytest.raises(SubmitError) as exc:
        apply_options(SlurmOptions(), parse_slurm_args(["--container-image=A", "id"], c)[0],
                      c, "cli")
    assert str(exc.value).startswith(f"{prog}: error: invalid image reference")


def qsub(argv: list[str]) -> dict[str, object]:
    sub = parse_qsub(argv, ctx("qsub")).submission
    return json.loads(sub.extra["container"])  # type: ignore[no-any-return]


def test_qsub_container_resource_and_pbs_pro_variable() -> None:
    got = qsub(["-l", "container_image=docker://127.0.0.1:5000/t/bb:1,walltime=60",
                "-l", "container_mounts=/a:/b:ro+nosuid+/c", "job.sh"])
    assert got["image"] == "docker://127.0.0.1:5000/t/bb:1"
    assert [(m["source"], m["target"], m["readonly"]) for m in got["mounts"]] == [  # type: ignore[index]
        ("/a", "/b", True), ("/c", "/c", False)]
    assert qsub(["-v", "CONTAINER_IMAGE=alpine:3", "job.sh"])["image"] == \
        "docker://docker.io/library/alpine:3"
    sub = parse_qsub(["job.sh"], ctx("qsub")).submission
    assert "container" not in sub.extra and "pbs_l_container_image" not in sub.extra


def test_qsub_bad_image_is_an_illegal_resource_value() -> None:
    with pytest.raises(SubmitError) as exc:
        parse_qsub(["-l", "container_image=UPPER", "job.sh"], ctx("qsub"))
    assert exc.value.exit_code == 166
    assert str(exc.value).splitlines() == [
        "qsub: Illegal attribute or resource value Resource_List.container_image",
        "qsub: invalid image reference 'UPPER': bad name component 'UPPER' (lowercase "
        "letters, digits, '.', '_', '-')"]


def test_spec_wire_form_round_trips_and_is_checked() -> None:
    spec = ContainerSpec.from_text(json.dumps(spec_of(["--container-image=busybox",
                                                       "--container-mounts=/d:/e:ro",
                                                       "job.sh"])))
    assert ContainerSpec.from_text(spec.to_text()) == spec
    for bad in ('{"image": "Bad"}', '{"image": "x", "mounts": [{"source": "rel", '
                '"target": "/x"}]}', "[]", "{", '{"kind": "named", "image": ""}'):
        with pytest.raises(ContainerError):
            ContainerSpec.from_text(bad)
