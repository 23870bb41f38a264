"""Apptainer jobs on a real runner: real Apptainer (a real ``apptainer`` on PATH, or
Debian sid's through ``scripts/apptainer-sid``), a SIF built here from the busybox image
the registry tests push, the job as a real unprivileged user in its real cgroup."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.agent import nvbind
from corral.agent.pullchild import pull_main
from corral.agent.runner import JobRunner
from corral.agent.runtimes import settings
from corral.containers.config import ContainersConfig
from corral.containers.spec import ContainerSpec, Mount, parse_image
from tests.agent.conftest import CGROUP_ROOT, kill_leftovers, make_request, wait_exits
from tests.apptainer import build_sif, build_sif_from, require_apptainer
from tests.registry import Registry, require_containers, running_registry


@pytest.fixture(scope="module")
def images() -> Iterator[tuple[Registry, Path, str]]:
    """(registry, directory holding bb.sif, apptainer program): the SIF is made by
    ``apptainer build`` from the busybox image pushed to the loopback registry."""
    require_containers()
    program = require_apptainer()
    d = Path(tempfile.mkdtemp(prefix="corral-apt-", dir="/tmp"))
    os.chmod(d, 0o755)
    with running_registry() as reg:
        # a 1777 directory and a setuid file: the node must not share them as they are
        ref = reg.push_busybox("test/abb:1", os_name="Corral Apptainer Image",
                               extra={"srv/drop/tool": b"#!/bin/sh\n"},
                               modes={"srv/drop": 0o1777, "srv/drop/tool": 0o4755})
        build_sif(program, ref, d / "bb.sif")
        yield reg, d, program
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def arunner(tmp_path: Path, images: tuple[Registry, Path, str]) -> Iterator[JobRunner]:
    reg, d, program = images
    cc = ContainersConfig(runtime="apptainer", apptainer=program,
                          insecure_registries=(reg.host,), cache_dir=str(d / "cache"))
    st = settings(cc, str(tmp_path), "aptnode")
    assert st.engine == "apptainer" and st.apptainer == program
    r = JobRunner(tmp_path / "state", cgroup_root=CGROUP_ROOT, node_name="aptnode",
                  containers=st)
    yield r
    for jid in r.running():
        r.cancel(jid, grace_s=0)
    r.close()
    kill_leftovers(tmp_path / "state")


def work(d: Path) -> Path:
    w = d / "work"
    w.mkdir(exist_ok=True)
    os.chmod(w, 0o1777)
    return w


def launch(r: JobRunner, jid: int, w: Path, user: tuple[str, int, int, int], script: str,
           image: str, **kw: object) -> None:
    name, uid, gid, _supp = user
    r.launch(make_request(jid, w, script, user=name, uid=uid, gid=gid,
                          stdout=str(w / f"out-{jid}.txt"), env={"SLURM_JOB_ID": str(jid)},
                          extra={"container": ContainerSpec(parse_image(image)).to_text()},
                          **kw))


def notes(r: JobRunner, jid: int) -> list[str]:
    return list((r.status(jid) or {}).get("notes") or [])


PROBE = ("#!/bin/sh\n. /etc/os-release; echo \"os=$NAME\"\necho \"ids=$(id -u) $(id -g)\"\n"
         "echo \"cwd=$(pwd) job=$SLURM_JOB_ID\"\ngrep -c . /proc/self/cgroup >/dev/null\n"
         "echo \"cg=$(grep -m1 job_ /proc/self/cgroup)\"\n"
         "grep -q 'NoNewPrivs:.1' /proc/self/status && echo nnp\n"
         "echo hi > made-inside.txt\nexit 4\n")


def test_sif_job_is_the_image_as_the_user_then_a_cache_hit(
        arunner: JobRunner, images: tuple[Registry, Path, str],
        test_user: tuple[str, int, int, int]) -> None:
    _reg, d, _program = images
    w = work(d)
    launch(arunner, 1, w, test_user, PROBE, str(d / "bb.sif"), mem_mb=256)
    ex = wait_exits(arunner, 1, 60)[1]
    out = (w / "out-1.txt").read_text()
    assert (ex.state, ex.exit_code) == ("FAILED", 4), (ex, out)
    assert "os=Corral Apptainer Image" in out, out
    assert f"ids={test_user[1]} {test_user[2]}" in out, out
    assert f"cwd={w} job=1" in out and "nnp" in out, out
    assert "job_1" in out.split("cg=", 1)[1], out  # inside the job's own cgroup
    assert (w / "made-inside.txt").stat().st_uid == test_user[1]
    assert any("(apptainer, sha256:" in n and "unpacked" in n for n in notes(arunner, 1))
    # the second job with the same SIF starts from the cached sandbox
    launch(arunner, 2, w, test_user, "#!/bin/sh\n. /etc/os-release; echo $NAME\n",
           str(d / "bb.sif"))
    ex = wait_exits(arunner, 1, 60)[2]
    assert ex.state == "COMPLETED", ex
    assert "Corral Apptainer Image" in (w / "out-2.txt").read_text()
    n2 = notes(arunner, 2)
    assert any("cached" in n for n in n2) and not any("unpacked" in n for n in n2), n2
    trees = list((d / "cache" / "images").iterdir())
    assert len(trees) == 1, trees
    # shared by all users: no setuid bits, nothing others may write (the image has both)
    tree = trees[0] / "rootfs"
    unsafe = [p for p in tree.rglob("*") if not p.is_symlink() and p.stat().st_mode & 0o7022]
    assert not unsafe, unsafe
    assert (tree / "srv/drop/tool").stat().st_mode & 0o777 == 0o755
    # unpacked as nobody, then made root's: no user owns (so may change) the shared tree
    assert {p.lstat().st_uid for p in tree.rglob("*")} | {tree.stat().st_uid} == {0}


def test_registry_image_through_apptainer(arunner: JobRunner,
                                          images: tuple[Registry, Path, str],
                                          test_user: tuple[str, int, int, int]) -> None:
    reg, d, _program = images
    w = work(d)
    launch(arunner, 11, w, test_user, PROBE, reg.ref("test/abb:1"))
    ex = wait_exits(arunner, 1, 60)[11]
    out = (w / "out-11.txt").read_text()
    assert ex.exit_code == 4 and "os=Corral Apptainer Image" in out, (ex, out)
    assert f"ids={test_user[1]} {test_user[2]}" in out, out
    assert any("pulled" in n for n in notes(arunner, 11))


def test_private_sif_runs_directly_not_from_the_cache(
        arunner: JobRunner, images: tuple[Registry, Path, str],
        test_user: tuple[str, int, int, int]) -> None:
    """A SIF only its owner may read is never unpacked into the shared cache: Apptainer
    runs the file itself as the user (squashfuse; skipped where /dev/fuse is closed)."""
    _reg, d, _program = images
    if not os.path.exists("/dev/fuse") or os.stat("/dev/fuse").st_mode & 0o006 != 0o006:
        pytest.skip("/dev/fuse is not open to users: an unprivileged SIF mount cannot work")
    w = work(d)
    mine = d / "mine.sif"
    shutil.copy(d / "bb.sif", mine)
    os.chown(mine, test_user[1], test_user[2])
    os.chmod(mine, 0o600)
    cached = d / "cache" / "images"
    before = sorted(p.name for p in cached.iterdir()) if cached.exists() else []
    launch(arunner, 41, w, test_user, "#!/bin/sh\n. /etc/os-release; echo $NAME\n", str(mine))
    ex = wait_exits(arunner, 1, 60)[41]
    assert ex.state == "COMPLETED", (ex, (w / "out-41.txt").read_text())
    assert "Corral Apptainer Image" in (w / "out-41.txt").read_text()
    assert f"container {mine} (apptainer)" in notes(arunner, 41)
    assert (sorted(p.name for p in cached.iterdir()) if cached.exists() else []) == before


def test_limits_cancel_and_signals_hold_in_apptainer(
        arunner: JobRunner, images: tuple[Registry, Path, str],
        test_user: tuple[str, int, int, int]) -> None:
    _reg, d, _program = images
    w = work(d)
    sif = str(d / "bb.sif")
    hog = '#!/bin/sh\nawk "BEGIN{s=\\"x\\"; while(1){s=s s}}"\n'
    launch(arunner, 31, w, test_user, hog, sif, mem_mb=64)
    launch(arunner, 32, w, test_user, "#!/bin/sh\nkill -TERM $$\n", sif)
    launch(arunner, 33, w, test_user, "#!/bin/sh\necho started\nexec sleep 300\n", sif)
    out33 = w / "out-33.txt"
    deadline = time.monotonic() + 30
    while "started" not in (out33.read_text() if out33.exists() else ""):
        assert time.monotonic() < deadline, "job 33 did not start"
        time.sleep(0.02)
    t0 = time.monotonic()
    arunner.cancel(33, grace_s=5)
    ex = wait_exits(arunner, 3, 60)
    assert ex[31].state == "OUT_OF_MEMORY" and ex[31].max_rss_mb <= 64.5, ex[31]
    assert (ex[32].state, ex[32].signal) == ("FAILED", 15), ex[32]  # 128+15 is the signal
    assert ex[33].state == "CANCELLED" and time.monotonic() - t0 < 5, ex[33]


def test_two_users_at_once_unpack_one_sif_once(
        tmp_path: Path, images: tuple[Registry, Path, str],
        test_user: tuple[str, int, int, int]) -> None:
    """A cold cache, the same SIF for the test user and root at the same moment: one
    unpack (the other job waits on the digest's lock, then finds the tree), one tree."""
    reg, d, program = images
    cc = ContainersConfig(runtime="apptainer", apptainer=program,
                          insecure_registries=(reg.host,), cache_dir=str(d / "cache2"))
    r = JobRunner(tmp_path / "state2", cgroup_root=CGROUP_ROOT, node_name="aptnode2",
                  containers=settings(cc, str(tmp_path), "aptnode2"))
    try:
        w = work(d)
        sif = str(d / "bb.sif")
        script = "#!/bin/sh\n. /etc/os-release; echo $NAME $(id -u)\n"
        launch(r, 51, w, test_user, script, sif)
        launch(r, 52, w, ("root", 0, 0, 0), script, sif)
        ex = wait_exits(r, 2, 60)
        assert ex[51].state == ex[52].state == "COMPLETED", ex
        assert (w / "out-51.txt").read_text().strip() == f"Corral Apptainer Image {test_user[1]}"
        assert (w / "out-52.txt").read_text().strip() == "Corral Apptainer Image 0"
        how = sorted("unpacked" if any("unpacked" in n for n in notes(r, j)) else "cached"
                     for j in (51, 52))
        assert how == ["cached", "unpacked"], how
        assert len(list((d / "cache2" / "images").iterdir())) == 1
    finally:
        r.close()
        kill_leftovers(tmp_path / "state2")


def test_cache_users_cannot_reach_fails_the_job_with_the_reason(
        tmp_path: Path, images: tuple[Registry, Path, str],
        test_user: tuple[str, int, int, int]) -> None:
    """pytest's tmp_path sits below a 0700 directory: the SIF is still unpacked (as
    nobody, in the system temp directory, then copied in), but the user's job is refused
    with the reason rather than failing inside Apptainer."""
    reg, d, program = images
    cache = tmp_path / "cache"
    cc = ContainersConfig(runtime="apptainer", apptainer=program, cache_dir=str(cache))
    r = JobRunner(tmp_path / "state3", cgroup_root=CGROUP_ROOT, node_name="aptnode3",
                  containers=settings(cc, str(tmp_path), "aptnode3"))
    try:
        w = work(d)
        launch(r, 61, w, test_user, "#!/bin/sh\ntrue\n", str(d / "bb.sif"))
        ex = wait_exits(r, 1, 60)[61]
        assert ex.state == "FAILED" and "is not reachable by the job's user" in ex.reason, ex
        trees = list((cache / "images").iterdir())
        assert len(trees) == 1 and (trees[0] / "rootfs" / "bin" / "busybox").is_file()
    finally:
        r.close()
        kill_leftovers(tmp_path / "state3")


def test_image_pull_of_a_sif_opens_it_as_the_asking_user(
        tmp_path: Path, images: tuple[Registry, Path, str],
        test_user: tuple[str, int, int, int], capsys: pytest.CaptureFixture[str]) -> None:
    """``corral image pull /x.sif`` on a node (the agent's pull child): unpacked into the
    cache when the asking user can read it; refused for a file the user cannot read."""
    _reg, d, program = images
    args = {"cache_dir": str(d / "cache4"), "apptainer": program, "uid": test_user[1],
            "gid": test_user[2]}
    assert pull_main([json.dumps({**args, "ref": str(d / "bb.sif")})]) == 0
    digest = capsys.readouterr().out.strip()
    assert digest.startswith("sha256:")
    assert (d / "cache4" / "images" / digest[7:] / "rootfs" / "bin" / "busybox").is_file()
    shutil.copy(d / "bb.sif", d / "root-only.sif")
    os.chmod(d / "root-only.sif", 0o600)
    assert pull_main([json.dumps({**args, "ref": str(d / "root-only.sif")})]) == 1
    assert "Permission denied (as user" in capsys.readouterr().err


def test_bad_sif_fails_the_job_with_its_reason(arunner: JobRunner,
                                               images: tuple[Registry, Path, str],
                                               test_user: tuple[str, int, int, int]) -> None:
    _reg, d, _program = images
    w = work(d)
    launch(arunner, 21, w, test_user, "#!/bin/sh\ntrue\n", str(d / "none.sif"))
    ex = wait_exits(arunner, 1, 30)[21]
    assert (ex.state, ex.exit_code) == ("FAILED", 1), ex
    assert ex.reason == (f"SIF image {d}/none.sif: No such file or directory "
                         f"(as user {test_user[1]})"), ex.reason
    (d / "junk.sif").write_bytes(b"not a sif\n" * 100)
    os.chmod(d / "junk.sif", 0o644)
    launch(arunner, 22, w, test_user, "#!/bin/sh\ntrue\n", str(d / "junk.sif"))
    ex = wait_exits(arunner, 1, 30)[22]
    assert ex.state == "FAILED" and ex.reason.startswith("not a usable SIF image: "), ex.reason
    shutil.copy(d / "bb.sif", d / "private.sif")
    os.chmod(d / "private.sif", 0o600)  # root's: the user cannot read it, so no job may
    launch(arunner, 23, w, test_user, "#!/bin/sh\ntrue\n", str(d / "private.sif"))
    ex = wait_exits(arunner, 1, 30)[23]
    assert ex.state == "FAILED" and "Permission denied (as user" in ex.reason, ex.reason


def test_sif_environment_container_env_and_runscript_in_a_batch_job(
        arunner: JobRunner, images: tuple[Registry, Path, str],
        test_user: tuple[str, int, int, int]) -> None:
    """A SIF's %environment reaches the batch job (Apptainer applies it); a name given
    with --container-env keeps the job's value over it; --container-entrypoint runs the
    SIF's %runscript with the command as its arguments (apptainer run)."""
    _reg, d, program = images
    sif = d / "env.sif"
    if not sif.exists():
        build_sif_from(program, d / "bb.sif", sif,
                       "%environment\n    export FROM_SIF=yes KEEP=image OTHER=image\n"
                       "%runscript\n    echo runscript \"$#\"\n")
    w = work(d)
    name, uid, gid, _supp = test_user
    for jid, spec in ((71, ContainerSpec(parse_image(str(sif)), env=("KEEP",))),
                      (72, ContainerSpec(parse_image(str(sif)), entrypoint=True))):
        arunner.launch(make_request(
            jid, w, "#!/bin/sh\necho \"env=$FROM_SIF $KEEP $OTHER\"\n", user=name, uid=uid,
            gid=gid, stdout=str(w / f"out-{jid}.txt"),
            env={"KEEP": "job", "OTHER": "job", "PATH": "/usr/bin:/bin"},
            extra={"container": spec.to_text()}))
    ex = wait_exits(arunner, 2, 60)
    out71, out72 = ((w / f"out-{j}.txt").read_text() for j in (71, 72))
    assert ex[71].state == "COMPLETED" and out71 == "env=yes job image\n", (ex[71], out71)
    # the runscript got the job's command line (the shell and its script) and ran instead
    assert ex[72].state == "COMPLETED" and out72 == "runscript 2\n", (ex[72], out72)


def test_gpu_job_on_a_node_without_a_driver_warns_and_runs(
        arunner: JobRunner, images: tuple[Registry, Path, str],
        test_user: tuple[str, int, int, int]) -> None:
    """--nv semantics with no NVIDIA driver here: a warning on the job's stderr, as
    Apptainer gives, and the job runs with its CUDA_VISIBLE_DEVICES."""
    _reg, d, _program = images
    w = work(d)
    launch(arunner, 81, w, test_user, "#!/bin/sh\necho gpus=$CUDA_VISIBLE_DEVICES\n",
           str(d / "bb.sif"), gpus=(0,))
    launch(arunner, 82, w, test_user, "#!/bin/sh\necho none\n", str(d / "bb.sif"))
    ex = wait_exits(arunner, 2, 60)
    out81, out82 = ((w / f"out-{j}.txt").read_text() for j in (81, 82))
    assert ex[81].state == "COMPLETED", (ex[81], out81)
    assert out81 == nvbind.NO_DRIVER + "gpus=0\n", out81
    assert ex[82].state == "COMPLETED" and out82 == "none\n", out82  # no GPU: no warning


def test_step_plan_of_a_gpu_sif_job_without_a_driver_warns(
        tmp_path: Path, images: tuple[Registry, Path, str],
        test_user: tuple[str, int, int, int]) -> None:
    """An srun step of a GPU job in a SIF: its tasks are told there is no driver (the
    step's plan carries the warning; stepd writes it on each task's stderr)."""
    from corral.agent.ctrjob import prepare

    reg, d, program = images
    st = settings(ContainersConfig(apptainer=program, cache_dir=str(d / "cache")),
                  str(tmp_path), "aptnode")
    if not st.runtime:
        pytest.skip("no runc/crun: srun container steps need one")
    name, uid, gid, _supp = test_user
    spec = ContainerSpec(parse_image(str(d / "bb.sif")))
    for gpus, want in (((0,), [nvbind.NO_DRIVER]), ((), [])):
        req = make_request(90, work(d), None, user=name, uid=uid, gid=gid, gpus=gpus)
        got = prepare(spec, req, st, jdir=str(tmp_path), node="aptnode", step="s0",
                      command=["true"], env={}, groups=(gid,), cgroup_rel=None,
                      script=False)
        os.close(got.pin_fd)
        assert got.plan.sif == str(d / "bb.sif") and got.plan.warnings == want, gpus


def test_named_container_of_a_sif_runs_on_the_oci_path_or_is_refused(
        tmp_path: Path, arunner: JobRunner, images: tuple[Registry, Path, str],
        test_user: tuple[str, int, int, int]) -> None:
    """--container-name with a SIF: where the node has runc/crun, the batch script runs
    in the named container on the OCI path (as srun steps do), with the SIF's
    %environment; a node with Apptainer only refuses it by name."""
    reg, d, program = images
    sif = d / "env.sif"
    if not sif.exists():
        build_sif_from(program, d / "bb.sif", sif,
                       "%environment\n    export FROM_SIF=yes KEEP=image OTHER=image\n"
                       "%runscript\n    echo runscript \"$#\"\n")
    w = work(d)
    name, uid, gid, _supp = test_user
    spec = ContainerSpec(parse_image(str(sif)), name="c1", writable=True, env=("KEEP",))
    script = ("#!/bin/sh\n. /etc/os-release\necho \"$NAME $(id -u) $FROM_SIF $KEEP "
              "$APPTAINER_NAME\"\n")
    st = settings(ContainersConfig(runtime="apptainer", apptainer=program,
                                   insecure_registries=(reg.host,),
                                   cache_dir=str(d / "cache")), str(tmp_path), "aptnode")
    if st.runtime:
        arunner.launch(make_request(91, w, script, user=name, uid=uid, gid=gid,
                                    stdout=str(w / "out-91.txt"), env={"KEEP": "job"},
                                    extra={"container": spec.to_text()}))
        ex = wait_exits(arunner, 1, 60)[91]
        out = (w / "out-91.txt").read_text()
        assert ex.state == "COMPLETED", (ex, out)
        assert out == f"Corral Apptainer Image {uid} yes job env.sif\n", out
        assert not any("(apptainer" in n for n in notes(arunner, 91)), notes(arunner, 91)
    bare = JobRunner(tmp_path / "st-bare", cgroup_root=CGROUP_ROOT, node_name="aptbare",
                     containers=dataclasses.replace(st, runtime=""))
    try:
        bare.launch(make_request(92, w, script, user=name, uid=uid, gid=gid,
                                 stdout=str(w / "out-92.txt"),
                                 extra={"container": spec.to_text()}))
        ex = wait_exits(bare, 1, 60)[92]
        assert ex.state == "FAILED" and ex.reason.startswith(
            "--container-name needs an OCI runtime (runc or crun) on this node"), ex
    finally:
        bare.close()
        kill_leftovers(tmp_path / "st-bare")


def test_a_bind_of_a_host_os_path_is_the_hosts(
        arunner: JobRunner, images: tuple[Registry, Path, str],
        test_user: tuple[str, int, int, int]) -> None:
    """A bind source under /etc or /usr (a driver library for --nv, a config file) is the
    host's file, also through the sid wrapper (whose own /etc and /usr are sid's)."""
    _reg, d, _program = images
    host = Path("/etc/debian_version") if Path("/etc/debian_version").exists() \
        else Path("/etc/os-release")
    w = work(d)
    name, uid, gid, _supp = test_user
    spec = ContainerSpec(parse_image(str(d / "bb.sif")),
                         mounts=(Mount(str(host), "/srv/host-file", readonly=True),))
    arunner.launch(make_request(95, w, "#!/bin/sh\ncat /srv/host-file\n", user=name, uid=uid,
                                gid=gid, stdout=str(w / "out-95.txt"),
                                extra={"container": spec.to_text()}))
    ex = wait_exits(arunner, 1, 60)[95]
    out = (w / "out-95.txt").read_text()
    assert ex.state == "COMPLETED" and out == host.read_text(), (ex, out)
