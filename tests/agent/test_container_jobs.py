"""Container jobs on a real runner: real runc, a real registry on loopback, the job as a
real unprivileged user, in its real cgroup."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.agent.runner import JobRunner
from corral.agent.runtimes import settings
from corral.containers.config import ContainersConfig
from corral.containers.spec import ContainerSpec, parse_bundle, parse_image
from tests.agent.conftest import CGROUP_ROOT, kill_leftovers, make_request, wait_exits
from tests.registry import Registry, require_containers, running_registry
from tests.users import ensure_user

USER = "corraltest"


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    require_containers()
    with running_registry() as reg:
        reg.push_busybox("test/bb:1", os_name="Corral Test Image One")
        yield reg


@pytest.fixture(scope="module")
def user() -> Iterator[pwd.struct_passwd]:
    require_containers()
    yield ensure_user(USER)


@pytest.fixture
def space() -> Iterator[Path]:
    """A directory the job's user can reach (pytest's tmp_path is under a 0700 dir)."""
    d = Path(tempfile.mkdtemp(prefix="corral-ctr-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def crunner(tmp_path: Path, space: Path, registry: Registry) -> Iterator[JobRunner]:
    cc = ContainersConfig(insecure_registries=(registry.host,),
                          cache_dir=str(space / "images"))
    st = settings(cc, str(tmp_path), "ctrnode")
    r = JobRunner(tmp_path / "state", cgroup_root=CGROUP_ROOT, node_name="ctrnode",
                  containers=st)
    yield r
    for jid in r.running():
        r.cancel(jid, grace_s=0)
    try:
        wait_exits(r, len(r.running()), timeout_s=10)
    except AssertionError:
        pass
    r.close()
    kill_leftovers(tmp_path / "state")


def workdir(space: Path) -> Path:
    w = space / "work"
    w.mkdir(exist_ok=True)
    os.chmod(w, 0o1777)
    return w


def launch(r: JobRunner, jid: int, w: Path, pw: pwd.struct_passwd, script: str,
           image: str, **kw: object) -> None:
    spec = ContainerSpec(parse_image(image) if "://" in image or not image.startswith("/")
                         else parse_bundle(image))
    r.launch(make_request(jid, w, script, user=pw.pw_name, uid=pw.pw_uid, gid=pw.pw_gid,
                          stdout=str(w / "out-%j.txt"), env={"SLURM_JOB_ID": str(jid)},
                          extra={"container": spec.to_text(), **kw.pop("extra", {})},  # type: ignore[dict-item]
                          **kw))


def test_job_runs_in_the_image_as_the_user(crunner: JobRunner, space: Path,
                                           registry: Registry,
                                           user: pwd.struct_passwd) -> None:
    w = workdir(space)
    script = ("#!/bin/sh\n. /etc/os-release; echo \"os=$NAME\"; echo \"uid=$(id -u) "
              "gid=$(id -g)\"; echo \"cwd=$(pwd)\"; echo \"job=$SLURM_JOB_ID\"\n"
              "touch /probe 2>/dev/null || echo ro-root\necho written > result.txt\n"
              "grep -q NoNewPrivs:.1 /proc/self/status && echo nnp\n"
              "grep CapEff /proc/self/status\nexit 3\n")
    launch(crunner, 1, w, user, script, registry.ref("test/bb:1"))
    ex = wait_exits(crunner, 1, 60)[1]
    assert ex.exit_code == 3, ex
    out = (w / "out-1.txt").read_text()
    assert "os=Corral Test Image One" in out, out
    assert f"uid={user.pw_uid} gid={user.pw_gid}" in out
    assert f"cwd={w}" in out and "job=1" in out and "ro-root" in out and "nnp" in out
    assert "CapEff:\t0000000000000000" in out
    assert (ex.state, ex.exit_code) == ("FAILED", 3)
    assert (w / "result.txt").stat().st_uid == user.pw_uid  # the submit dir is mounted
    assert (w / "out-1.txt").stat().st_uid == user.pw_uid  # output opened as the user
    # the host's /etc/os-release was not the image's
    assert "Corral Test Image One" not in Path("/etc/os-release").read_text()


def test_second_job_is_a_cache_hit_and_memory_limit_holds(crunner: JobRunner, space: Path,
                                                          registry: Registry,
                                                          user: pwd.struct_passwd) -> None:
    w = workdir(space)
    ref = registry.ref("test/bb:1")
    launch(crunner, 11, w, user, "#!/bin/sh\ntrue\n", ref)
    first = wait_exits(crunner, 1, 60)[11]
    notes1 = (crunner.status(11) or {}).get("notes") or []
    assert first.state == "COMPLETED", first
    assert any("pulled" in n for n in notes1), notes1
    hog = '#!/bin/sh\nawk "BEGIN{s=\\"x\\"; while(1){s=s s}}"\n'
    launch(crunner, 12, w, user, hog, ref, mem_mb=64)
    second = wait_exits(crunner, 1, 60)[12]
    notes2 = (crunner.status(12) or {}).get("notes") or []
    assert any("cached" in n for n in notes2) and not any("pulling" in n for n in notes2)
    assert second.state == "OUT_OF_MEMORY", second
    assert second.max_rss_mb <= 64.5
    assert "oom_kill event" in (w / "out-12.txt").read_text()


def test_cancel_and_time_limit_end_container_jobs(crunner: JobRunner, space: Path,
                                                  registry: Registry,
                                                  user: pwd.struct_passwd) -> None:
    w = workdir(space)
    ref = registry.ref("test/bb:1")
    launch(crunner, 21, w, user, "#!/bin/sh\necho started\nexec sleep 300\n", ref)
    deadline = time.monotonic() + 30
    while "started" not in ((w / "out-21.txt").read_text() if (w / "out-21.txt").exists()
                            else ""):
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.02)
    t0 = time.monotonic()
    crunner.cancel(21, grace_s=5)
    ex = wait_exits(crunner, 1, 30)[21]
    assert ex.state == "CANCELLED" and time.monotonic() - t0 < 5  # SIGTERM reached sleep
    launch(crunner, 22, w, user, "#!/bin/sh\nexec sleep 300\n", ref, time_limit_s=1)
    ex = wait_exits(crunner, 1, 30)[22]
    assert ex.state == "TIMEOUT"
    assert "DUE TO TIME LIMIT" in (w / "out-22.txt").read_text()
    leftover = [d for d in Path("/sys/fs/cgroup").glob(f"*/{CGROUP_ROOT}/ctrnode/job_2*")]
    assert not leftover, leftover


def test_bad_reference_fails_the_job_with_its_reason(crunner: JobRunner, space: Path,
                                                     registry: Registry,
                                                     user: pwd.struct_passwd) -> None:
    w = workdir(space)
    launch(crunner, 31, w, user, "#!/bin/sh\ntrue\n", registry.ref("test/none:9"))
    ex = wait_exits(crunner, 1, 60)[31]
    assert ex.state == "FAILED" and ex.exit_code == 1
    assert ex.reason.startswith("image pull failed: cannot pull "
                                f"docker://{registry.host}/test/none:9"), ex.reason
    assert "manifest unknown" in ex.reason
    # an unreachable registry: the same kind of end, never NODE_FAIL
    launch(crunner, 32, w, user, "#!/bin/sh\ntrue\n", "docker://127.0.0.1:9/x:1")
    ex = wait_exits(crunner, 1, 60)[32]
    assert ex.state == "FAILED" and ex.reason.startswith("image pull failed"), ex.reason


def test_oci_bundle_and_mount_checks_as_the_user(crunner: JobRunner, space: Path,
                                                 registry: Registry,
                                                 user: pwd.struct_passwd) -> None:
    """Slurm's --container=BUNDLE: the bundle's rootfs and env; a bind source the user
    cannot reach on the host is refused."""
    w = workdir(space)
    bundle = space / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    os.chmod(bundle, 0o755)
    subprocess.run(["cp", "-a", "/bin/busybox", str(bundle / "rootfs")], check=True)
    (bundle / "rootfs" / "bin").mkdir()
    (bundle / "rootfs" / "bin" / "sh").symlink_to("/busybox")
    (bundle / "rootfs" / "bin" / "cat").symlink_to("/busybox")
    (bundle / "config.json").write_text('{"root": {"path": "rootfs"}, "process": '
                                        '{"env": ["FROM_BUNDLE=yes", "PATH=/bin"]}}')
    launch(crunner, 41, w, user, "#!/bin/sh\necho bundle=$FROM_BUNDLE\n", str(bundle))
    ex = wait_exits(crunner, 1, 60)[41]
    assert ex.state == "COMPLETED", ex
    assert "bundle=yes" in (w / "out-41.txt").read_text()
    secret = space / "private"
    (secret / "inner").mkdir(parents=True)
    os.chmod(secret, 0o700)
    spec = ContainerSpec(parse_image(registry.ref("test/bb:1")))
    text = spec.to_text().replace('"mounts":[]', '"mounts":[{"source":"%s","target":"/x",'
                                  '"readonly":true,"flags":[]}]' % (secret / "inner"))
    crunner.launch(make_request(42, w, "#!/bin/sh\nls /x\n", user=user.pw_name,
                                uid=user.pw_uid, gid=user.pw_gid,
                                stdout=str(w / "out-%j.txt"), extra={"container": text}))
    ex = wait_exits(crunner, 1, 60)[42]
    assert ex.state == "FAILED" and "Permission denied (as the job's user)" in ex.reason, ex


def test_remap_root_is_root_inside_the_user_outside(crunner: JobRunner, space: Path,
                                                    registry: Registry,
                                                    user: pwd.struct_passwd) -> None:
    """--container-remap-root (where the cluster allows it): uid 0 in a user namespace
    that maps only the job's user; what it writes belongs to the user on the host."""
    w = workdir(space)
    spec = ContainerSpec(parse_image(registry.ref("test/bb:1")), remap_root=True)
    crunner.launch(make_request(51, w, "#!/bin/sh\nid -u\ntouch made-inside\n"
                                "cat /proc/self/uid_map\n", user=user.pw_name,
                                uid=user.pw_uid, gid=user.pw_gid,
                                stdout=str(w / "out-%j.txt"),
                                extra={"container": spec.to_text()}))
    ex = wait_exits(crunner, 1, 60)[51]
    out = (w / "out-51.txt").read_text()
    assert ex.state == "COMPLETED", (ex, out)
    lines = out.split()
    assert lines[0] == "0" and lines[1:4] == ["0", str(user.pw_uid), "1"], out
    assert (w / "made-inside").stat().st_uid == user.pw_uid


def test_a_link_to_what_the_user_cannot_reach_is_not_mounted(
        crunner: JobRunner, space: Path, registry: Registry,
        user: pwd.struct_passwd) -> None:
    w = workdir(space)
    secret = space / "rootonly"
    (secret / "data").mkdir(parents=True)
    os.chmod(secret, 0o700)
    link = w / "link"
    link.symlink_to(secret / "data")
    text = ContainerSpec(parse_image(registry.ref("test/bb:1"))).to_text().replace(
        '"mounts":[]', '"mounts":[{"source":"%s","target":"/x","readonly":false,'
        '"flags":[]}]' % link)
    crunner.launch(make_request(52, w, "#!/bin/sh\nls /x\n", user=user.pw_name,
                                uid=user.pw_uid, gid=user.pw_gid,
                                stdout=str(w / "out-%j.txt"), extra={"container": text}))
    ex = wait_exits(crunner, 1, 60)[52]
    assert ex.state == "FAILED" and "(as the job's user)" in ex.reason, ex


def test_two_agents_with_one_node_name_never_share_runtime_state(
        tmp_path: Path, space: Path, registry: Registry, user: pwd.struct_passwd) -> None:
    """Two agent trees on one host (each with its own parent cgroup, as two agent trees
    must have) with the same node name and the same job id at once (two sessions' test
    clusters: both have ``testnode`` and job 1): each runs its own container; one's
    ``runc run`` or end-of-job ``runc delete`` never meets the other's (the runtime's
    state lives under a name of the agent's state directory)."""
    cc = ContainersConfig(insecure_registries=(registry.host,),
                          cache_dir=str(space / "images"))
    runners = []
    try:
        for name in ("a", "b"):
            st = settings(cc, str(tmp_path / name), "ctrtwin")
            runners.append(JobRunner(tmp_path / name / "state",  # two trees: two parents
                                     cgroup_root=f"{CGROUP_ROOT}-{name}",
                                     node_name="ctrtwin", containers=st))
        assert runners[0].containers.state_root != runners[1].containers.state_root
        for i, r in enumerate(runners):
            w = space / f"twin{i}"
            w.mkdir()
            os.chmod(w, 0o1777)
            launch(r, 1, w, user, f"#!/bin/sh\nsleep 0.5\necho ok {i}\n",
                   registry.ref("test/bb:1"))
        for i, r in enumerate(runners):
            ex = wait_exits(r, 1, 60)[1]
            out = (space / f"twin{i}" / "out-1.txt").read_text()
            assert (ex.state, out) == ("COMPLETED", f"ok {i}\n"), (ex, out)
    finally:
        for i, r in enumerate(runners):
            for jid in r.running():
                r.cancel(jid, grace_s=0)
            r.close()
            kill_leftovers(tmp_path / ("a", "b")[i] / "state")
