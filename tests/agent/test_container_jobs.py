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
from typing import Any

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


def test_gpu_job_on_a_node_without_a_driver_runs_with_nothing_injected(
        crunner: JobRunner, space: Path, registry: Registry, user: pwd.struct_passwd) -> None:
    """The no-GPU path for real (this machine has no NVIDIA driver): a job given a GPU
    runs in its image with a warning first on its output, no /dev/nvidia* and no driver
    library path; a job without GPUs gets no warning."""
    from corral.agent.ocigpu import NO_DRIVER

    w = workdir(space)
    script = ("#!/bin/sh\necho gpus=$CUDA_VISIBLE_DEVICES\nls /dev | grep -c nvidia\n"
              "echo ld=$LD_LIBRARY_PATH\nls /usr/local/nvidia 2>&1 | grep -c 'No such'\n")
    launch(crunner, 31, w, user, script, registry.ref("test/bb:1"), gpus=(0,))
    launch(crunner, 32, w, user, "#!/bin/sh\necho plain\n", registry.ref("test/bb:1"))
    exits = wait_exits(crunner, 2, 60)
    assert exits[31].state == "COMPLETED" and exits[32].state == "COMPLETED", exits
    assert (w / "out-31.txt").read_text() == NO_DRIVER + "gpus=0\n0\nld=\n1\n"
    assert (w / "out-32.txt").read_text() == "plain\n"


STAND_INS = (("/dev/nvidia0", 229), ("/dev/nvidia-uvm", 232), ("/dev/nvidia-modeset", 237))


def _gpu_plan(space: Path, registry: Registry, user: pwd.struct_passwd, script: str,
              step: str, devices: tuple[tuple[str, int], ...] = STAND_INS
              ) -> tuple[Any, Path]:
    """A container plan of the test image with stand-in GPU files injected, and the work
    directory. Device numbers that runc's own default rules do not allow: /dev/fuse's
    (10:229) as /dev/nvidia0, /dev/kvm's (10:232) as /dev/nvidia-uvm,
    /dev/loop-control's (10:237) as /dev/nvidia-modeset; a file as libcuda.so.1."""
    from corral.agent import ocigpu
    from corral.agent.container import plan
    from corral.agent.images import ImageCache
    from corral.containers.spec import Mount
    from tests.agent.conftest import CGROUP_ROOT

    st = settings(ContainersConfig(), str(space), "ctrnode")
    if not st.runtime:
        pytest.skip("needs an OCI runtime (runc or crun)")
    image = ImageCache(str(space / "images"), insecure=(registry.host,)).resolve(
        parse_image(registry.ref("test/bb:1")))
    lib = space / "libcuda.so.1"
    lib.write_text("stand-in driver\n")
    os.chmod(lib, 0o644)
    gpu = ocigpu.GpuSetup(
        mounts=[Mount(str(lib), f"{ocigpu.LIB_DIR}/libcuda.so.1", readonly=True)],
        devices=[ocigpu.DeviceNode(path, "c", 10, minor, 0o666, 0, 0)
                 for path, minor in devices],
        lib_path=ocigpu.LIB_DIR)
    w = workdir(space)
    jdir = space / f"gpujob-{step}"
    jdir.mkdir()
    p = plan(ContainerSpec(parse_image(registry.ref("test/bb:1"))), lower=image.rootfs,
             image_cfg={**image.config, "Env": ["LD_LIBRARY_PATH=/opt/img"]}, job_id=41,
             restarts=0, step=step, node="ctrnode", jdir=str(jdir), runtime=st.runtime,
             state_root=str(space / "runc-state"), command=["/bin/sh", "-c", script],
             env={"PATH": "/usr/bin:/bin"}, workdir=str(w), user=user.pw_name,
             uid=user.pw_uid, gid=user.pw_gid, groups=(user.pw_gid,),
             cgroup_rel=f"{CGROUP_ROOT}/gpu-41", default_mounts=tuple(gpu.mounts))
    ocigpu.inject(p.config, gpu)
    p.lib_path = gpu.lib_path
    return p, w


def gpu_probe(names: tuple[str, ...] = ("nvidia0", "nvidia-uvm", "nvidia-modeset")) -> str:
    return "".join(f"(exec 3</dev/{n}) 2>/dev/null && echo {n}-open || echo {n}-refused\n"
                   for n in names) + (
        "ls /dev/nvidia1 2>/dev/null || echo none1\n"
        "cat /usr/local/nvidia/lib64/libcuda.so.1\necho ld=$LD_LIBRARY_PATH\n"
        "(echo x > /usr/local/nvidia/lib64/libcuda.so.1) 2>/dev/null || echo lib-ro\n"
        "id -u\n")


def test_injected_devices_and_driver_files_work_under_real_runc(
        space: Path, registry: Registry, user: pwd.struct_passwd) -> None:
    """No GPU here, so stand-ins (``_gpu_plan``) go through the same spec: the devices
    with allow rules open inside, /dev/nvidia-modeset with its rule taken out is refused
    by the container's device cgroup (the rules are what lets a GPU through), the
    library is bound read-only and its directory is first on LD_LIBRARY_PATH. runc runs
    the spec for real, as the job's user."""
    from corral.agent.container import cleanup, enter, leftover_cgroups

    p, w = _gpu_plan(space, registry, user, gpu_probe(), "gpu")
    rules = p.config["linux"]["resources"]["devices"]
    assert {"allow": True, "type": "c", "major": 10, "minor": 237, "access": "rwm"} in rules
    p.config["linux"]["resources"]["devices"] = [r for r in rules if r.get("minor") != 237]
    out = w / "gpu.out"
    pid = os.fork()
    if pid == 0:  # as the supervisor's job child: enter the mount namespace, exec runc
        try:
            enter(p)
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.execve(p.runtime, p.argv(), {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        finally:
            os._exit(99)
    try:
        _, status = os.waitpid(pid, 0)
    finally:
        cleanup(p.runtime, p.state_root, p.ctr_id,
                leftover_cgroups(str(p.config["linux"]["cgroupsPath"]), set()))
    text = out.read_text()
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert text.split("\n") == ["nvidia0-open", "nvidia-uvm-open", "nvidia-modeset-refused",
                                "none1", "stand-in driver",
                                "ld=/usr/local/nvidia/lib64:/opt/img", "lib-ro",
                                str(user.pw_uid), ""], text


def test_injected_devices_reach_an_srun_steps_tasks(
        space: Path, registry: Registry, user: pwd.struct_passwd) -> None:
    """An srun step has no OCI runtime: its step process binds the device list from the
    host's /dev at the same paths (enter_shared; real host devices stand in here, as a
    GPU's path is the same on the host and inside) and each task gets the library path
    (image_env). No runtime device cgroup here (the job's own cgroup is the limit)."""
    from corral.agent.container import chroot_task, enter_shared, image_env

    names = ("fuse", "kvm", "loop-control")
    probe = gpu_probe(names)
    p, w = _gpu_plan(space, registry, user, probe, "0",
                     tuple((f"/dev/{n}", m) for n, m in zip(names, (229, 232, 237),
                                                            strict=True)))
    out = w / "step.out"
    pid = os.fork()
    if pid == 0:  # the step process (root), then one task as the user
        try:
            root = enter_shared(p)
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            env = image_env({"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/host"}, p)
            chroot_task(root, "/")
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.setgroups([user.pw_gid])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            os.execve("/bin/sh", ["/bin/sh", "-c", probe], env)
        finally:
            os._exit(99)
    _, status = os.waitpid(pid, 0)
    text = out.read_text()
    assert os.waitstatus_to_exitcode(status) == 0, text
    # fuse is 0666 on the host; kvm and loop-control are bound as the host has them
    # (0660 root:kvm / root:disk), so the user is refused by their modes, not a cgroup
    assert text.split("\n") == ["fuse-open", "kvm-refused", "loop-control-refused",
                                "none1", "stand-in driver",
                                "ld=/usr/local/nvidia/lib64:/opt/img", "lib-ro",
                                str(user.pw_uid), ""], text
