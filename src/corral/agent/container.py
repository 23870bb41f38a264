"""Run a job's process in its container image: an OCI runtime (runc) on a bundle made per
job, inside the job's own cgroup, as the job's user.

The HPC container model (Apptainer's and enroot's, not Docker's): the container gets its
own **mount namespace only**. It shares the host's PID, network and IPC namespaces, so the
supervisor still sees (signals, accounts, kills) every process of the job, MPI ranks reach
each other as on the host, and srun's I/O and PMI work unchanged.

``plan(...)`` (in the supervisor, before the job forks) decides everything; ``enter(...)``
(in the forked job child, still root, already in the job's cgroups) does it:

1. ``unshare(CLONE_NEWNS)``, the whole tree made private: nothing below is seen by the
   host, and it all goes when the job's last process does (no unmount to forget);
2. a tmpfs on ``<job dir>/ctr`` (its size: ``writable_tmp_mb``, charged to the job's
   memory cgroup) with an overlay ``lower = the cached image``, ``upper`` in that tmpfs,
   mounted ``nodev,nosuid``: the shared cache tree is never written; mount points for
   home, the submit directory and ``--container-mounts`` and an ``/etc/passwd`` line for
   the user are made in the upper layer; ``--container-writable`` keeps the root writable
   (changes vanish with the job), else it is read-only;
3. every bind source is checked with the job user's credentials (``stat`` as that user):
   a user cannot bind what they could not reach on the host;
4. ``config.json`` (the OCI runtime spec): ``process.user`` = the job's uid, gid and
   groups, no capabilities, ``noNewPrivileges``; env = the job's (``SLURM_*`` included)
   with the image's ``Env`` on top, except names given with ``--container-env``;
   ``linux.cgroupsPath`` = a child of the job's own cgroup (memory, cpuset, pids and the
   tracking cgroup are hierarchical: the job's limits hold inside, and the supervisor's
   kill of the job's tree reaches it);
5. the caller opens the output files as the user and execs ``runc run`` (foreground: it
   forwards signals and exits with the job's status).

``--container-remap-root`` (where ``[containers] allow_remap_root``) adds a user namespace
mapping only the job's uid/gid to 0: root inside, the user outside, no privilege.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import os
import pwd
import shutil
from dataclasses import dataclass, field
from typing import Any

from corral.containers.spec import ContainerSpec, Mount

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_RDONLY = 0x2, 0x4, 0x1
MS_REC, MS_PRIVATE = 0x4000, 1 << 18
SCRIPT_FD = 3  # where the batch script's memfd is inside the container (--preserve-fds)


class ContainerSetupError(OSError):
    pass


@dataclass
class ContainerPlan:
    runtime: str  # path of runc
    state_root: str  # runc --root
    ctr_id: str
    bundle: str  # <job dir>/ctr: the tmpfs, config.json, the overlay
    lower: str  # the image's root filesystem
    writable: bool
    tmp_mb: int
    config: dict[str, Any]  # the OCI spec; root.path filled by enter()
    uid: int
    gid: int
    groups: tuple[int, ...]
    # bind mounts (home, submit directory, --container-mounts, default_mounts): opened as
    # the job's user and mounted from those file descriptors by ``enter``
    binds: list[Mount] = field(default_factory=list)
    lower_is_users: bool = False  # a directory or bundle the user named (opened as the user)
    files: dict[str, bytes] = field(default_factory=dict)  # written into the upper layer
    script: bool = False  # the memfd is passed as fd 3
    image_env: list[str] = field(default_factory=list)  # the image's Env (srun steps)
    keep_env: tuple[str, ...] = ()  # --container-env: names whose job value wins
    remap_root: bool = False  # a user namespace: the bundle lives under state_root
    named_dir: str = ""  # --container-name: the upper layer lives here (ctrjob._named)
    named_lock: int = -1  # held while this step uses the named container
    sif: str = ""  # a SIF's sandbox tree: its tasks get Apptainer's environment (aptenv)
    sif_run: bool = False  # ... and its %runscript in front (--container-entrypoint)
    warnings: list[str] = field(default_factory=list)  # for the job's / each task's stderr
    lib_path: str = ""  # GPU jobs: first on LD_LIBRARY_PATH (corral.agent.ocigpu; steps)

    def argv(self) -> list[str]:
        out = [self.runtime, "--root", self.state_root, "run", "--bundle", self.bundle]
        if self.script:
            out += ["--preserve-fds", "1"]
        return [*out, self.ctr_id]


_libc: Any = None


def _c() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    return _libc


def _mount(src: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    rc = _c().mount(src.encode(), target.encode(), fstype.encode() if fstype else None,
                    ctypes.c_ulong(flags), data.encode() if data else None)
    if rc != 0:
        err = ctypes.get_errno()
        raise ContainerSetupError(err, f"mount {fstype or 'bind'} on {target}: "
                                       f"{os.strerror(err)}")


def _passwd_files(lower: str, uid: int, gid: int, user: str, home: str) -> dict[str, bytes]:
    """``/etc/passwd`` and ``/etc/group`` of the image plus the job's user and group."""
    out: dict[str, bytes] = {}
    for name, line, key in (("passwd", f"{user}:x:{uid}:{gid}::{home}:/bin/sh\n", uid),
                            ("group", f"{_group_name(gid)}:x:{gid}:\n", gid)):
        path = os.path.join(lower, "etc", name)
        try:
            if os.path.islink(path):
                raise OSError
            with open(path, "rb") as fh:
                text = fh.read(1 << 20)
        except OSError:
            text = b""
        ids = set()
        for row in text.decode(errors="replace").splitlines():
            parts = row.split(":")
            if len(parts) > 2 and parts[2].isdigit():
                ids.add(int(parts[2]))
        if key in ids:
            continue
        if text and not text.endswith(b"\n"):
            text += b"\n"
        out[f"/etc/{name}"] = text + line.encode()
    return out


def _group_name(gid: int) -> str:
    import grp

    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"g{gid}"


def _env_list(job_env: dict[str, str], image_cfg: dict[str, Any],
              keep: tuple[str, ...]) -> list[str]:
    env = dict(job_env)
    for item in image_cfg.get("Env") or []:
        name, sep, value = str(item).partition("=")
        if sep and name not in keep:
            env[name] = value
    env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    return [f"{k}={v}" for k, v in env.items() if "\0" not in k + v]


def process_args(spec: ContainerSpec, image_cfg: dict[str, Any],
                 command: list[str]) -> list[str]:
    """What the container runs: ``command``; with ``--container-entrypoint`` the image's
    ENTRYPOINT before it, and without a command ENTRYPOINT + CMD (Docker's rule, which
    Kubernetes follows: arguments replace CMD; a pod's ``command`` replaces both, and
    the launcher then gives no ``--container-entrypoint``). ``[]``: nothing to run."""
    args = list(command)
    if spec.entrypoint:
        cmd = args or [str(a) for a in image_cfg.get("Cmd") or []]
        args = [str(a) for a in image_cfg.get("Entrypoint") or []] + cmd
    return args


def plan(spec: ContainerSpec, *, lower: str, image_cfg: dict[str, Any], job_id: int,
         restarts: int, step: str, node: str, jdir: str, runtime: str, state_root: str,
         command: list[str], env: dict[str, str], workdir: str, user: str, uid: int,
         gid: int, groups: tuple[int, ...], cgroup_rel: str | None,
         default_mounts: tuple[Mount, ...] = (), mount_home_default: bool = True,
         tmp_mb: int = 1024, script: bool = False,
         lower_is_users: bool = False) -> ContainerPlan:
    """Everything the job child needs to start ``command`` in the image at ``lower``."""
    try:
        home = pwd.getpwuid(uid).pw_dir
    except KeyError:
        home = env.get("HOME", "")
    mounts: list[dict[str, Any]] = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
         "options": ["nosuid", "noexec", "nodev", "mode=1777"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs",
         "options": ["nosuid", "noexec", "nodev", "ro"]},
    ]  # /tmp: a tmpfs mounted by ``enter`` (before the binds, which may lie below it)
    binds: list[Mount] = []
    bound: set[str] = set()

    def add(m: Mount) -> None:
        if m.target in bound or m.target == "/tmp":
            return
        top = m.target.split("/")[1]
        if top in ("proc", "sys"):
            raise ContainerSetupError(errno.EINVAL, f"cannot mount over {m.target} (the "
                                      "container's own /proc and /sys)")
        bound.add(m.target)
        if top == "dev":  # after the runtime's /dev: by path, and only from the host's /dev
            if not m.source.startswith("/dev/"):
                raise ContainerSetupError(errno.EINVAL, f"a mount into /dev must come from "
                                          f"the host's /dev, not {m.source}")
            opts = ["rbind", "ro" if m.readonly else "rw", "nosuid"]
            mounts.append({"destination": m.target, "type": "bind", "source": m.source,
                           "options": opts})
            return
        binds.append(m)

    if (spec.mount_home and mount_home_default) and home and home != "/" \
            and os.path.isdir(home):
        add(Mount(home, home))
    if os.path.isdir(workdir) and workdir != "/":
        add(Mount(workdir, workdir))
    for m in (*default_mounts, *spec.mounts):
        add(m)
    keep = spec.env
    args = process_args(spec, image_cfg, command)
    image_wd = str(image_cfg.get("WorkingDir") or "/")
    cwd = spec.workdir or (image_wd if spec.image_workdir else
                           workdir if workdir in bound else image_wd)
    process: dict[str, Any] = {
        "terminal": False, "args": args, "env": _env_list(env, image_cfg, keep), "cwd": cwd,
        "user": {"uid": uid, "gid": gid, "additionalGids": [g for g in groups if g != gid]},
        "noNewPrivileges": True,
        "capabilities": {"bounding": [], "effective": [], "inheritable": [], "permitted": [],
                         "ambient": []},
    }
    namespaces: list[dict[str, str]] = [{"type": "mount"}]
    linux: dict[str, Any] = {"namespaces": namespaces, "maskedPaths": [
        "/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"],
        "readonlyPaths": ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"]}
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in node)
    ctr_id = f"corral-{safe}-{job_id}-{restarts}-{step}"
    if cgroup_rel is not None:
        linux["cgroupsPath"] = f"/{cgroup_rel.strip('/')}/ctr-{step}"
    if spec.remap_root:
        namespaces.append({"type": "user"})
        linux["uidMappings"] = [{"containerID": 0, "hostID": uid, "size": 1}]
        linux["gidMappings"] = [{"containerID": 0, "hostID": gid, "size": 1}]
        process["user"] = {"uid": 0, "gid": 0}
        for entry in mounts:  # no fresh proc/sysfs in a user namespace without pid/net ones
            if entry["destination"] in ("/proc", "/sys"):
                entry.update({"type": "bind", "source": entry["destination"],
                              "options": ["rbind", "nosuid", "nodev", "noexec"]
                              + (["ro"] if entry["destination"] == "/sys" else [])})
        linux.pop("cgroupsPath", None)
    config = {"ociVersion": "1.0.2", "process": process,
              "root": {"path": "", "readonly": not spec.writable},
              "hostname": "", "mounts": mounts, "linux": linux}
    bundle = os.path.join(jdir, f"ctr-{step}")
    if spec.remap_root:  # the user namespace's root (the user) must reach the bundle
        bundle = os.path.join(state_root, "bundles", ctr_id)
    return ContainerPlan(
        runtime=runtime, state_root=state_root, ctr_id=ctr_id, bundle=bundle, lower=lower,
        writable=spec.writable, tmp_mb=tmp_mb, config=config, uid=uid, gid=gid,
        groups=groups, binds=binds, lower_is_users=lower_is_users,
        files=_passwd_files(lower, uid, gid, user, home or "/"), script=script,
        image_env=[str(e) for e in image_cfg.get("Env") or []], keep_env=keep,
        remap_root=spec.remap_root)


def as_user(p: ContainerPlan) -> tuple[int, int, list[int]]:
    """Switch the effective ids of this (single-threaded, forked) process to the job's
    user; returns what ``back_to_root`` needs."""
    saved = (os.geteuid(), os.getegid(), os.getgroups())
    os.setgroups(list(p.groups))
    os.setegid(p.gid)
    os.seteuid(p.uid)
    return saved


def back_to_root(saved: tuple[int, int, list[int]]) -> None:
    os.seteuid(saved[0])
    os.setegid(saved[1])
    os.setgroups(saved[2])


def _open_as_user(p: ContainerPlan) -> tuple[int, list[tuple[Mount, int, bool]]]:
    """O_PATH descriptors of the user's lower layer (-1 for the cache's) and of every bind
    source, opened with the user's credentials: what the user could not reach cannot be
    mounted, and a link swapped in after this check changes nothing (mounts are made from
    these descriptors, not from the paths)."""
    saved = as_user(p)
    fds: list[tuple[Mount, int, bool]] = []
    lower_fd = -1
    try:
        paths = ([p.lower] if p.lower_is_users else []) + [m.source for m in p.binds]
        for i, path in enumerate(paths):
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError as exc:
                for _m, other, _d in fds:
                    os.close(other)
                raise ContainerSetupError(exc.errno or 1, f"container path {path}: "
                                          f"{exc.strerror or exc} (as the job's user)") from None
            if p.lower_is_users and i == 0:
                lower_fd = fd
            else:
                import stat as st

                is_dir = st.S_ISDIR(os.fstat(fd).st_mode)
                fds.append((p.binds[i - (1 if p.lower_is_users else 0)], fd, is_dir))
    finally:
        back_to_root(saved)
    return lower_fd, fds


def _bind_fd(root: str, m: Mount, fd: int, is_dir: bool) -> None:
    target = os.path.join(root, m.target.lstrip("/"))
    _make_point(root, target, is_dir)
    _mount(f"/proc/self/fd/{fd}", target, None, 0x1000 | MS_REC, None)  # MS_BIND
    flags = MS_NOSUID | MS_NODEV | (0x8 if "noexec" in m.flags else 0)
    _mount("none", target, None, 0x20 | 0x1000 | flags | (MS_RDONLY if m.readonly else 0),
           None)  # MS_REMOUNT | MS_BIND: nosuid, nodev, ro as asked


def enter(p: ContainerPlan) -> None:
    """In the job child, as root, before it opens its files and execs ``p.argv()``."""
    if _c().unshare(CLONE_NEWNS) != 0:
        err = ctypes.get_errno()
        raise ContainerSetupError(err, f"unshare(CLONE_NEWNS): {os.strerror(err)}")
    _mount("none", "/", None, MS_REC | MS_PRIVATE, None)
    # opened in the new namespace: a bind's source must be a mount of the caller's own
    lower_fd, fds = _open_as_user(p)
    b = p.bundle
    mode = 0o700
    if p.remap_root:  # searchable (not readable) down to the bundle for the mapped user
        mode = 0o711
        for d in (p.state_root, os.path.dirname(b)):
            os.makedirs(d, mode=0o711, exist_ok=True)
            os.chmod(d, 0o711)
    os.makedirs(b, mode=mode, exist_ok=True)
    _mount("tmpfs", b, "tmpfs", MS_NOSUID | MS_NODEV, f"mode={mode:04o},size={p.tmp_mb}m")
    for d in ("upper", "work", "root"):
        os.mkdir(os.path.join(b, d), 0o755)
    upper, work = f"{b}/upper", f"{b}/work"
    if p.named_dir:  # the named container's changes outlive this step
        upper, work = f"{p.named_dir}/upper", f"{p.named_dir}/work"
        for d in (upper, work):
            os.makedirs(d, mode=0o755, exist_ok=True)
    root = os.path.join(b, "root")
    lower = p.lower
    if lower_fd >= 0:  # overlayfs wants a path: the user's tree bound here first
        lower = os.path.join(b, "lower")
        os.mkdir(lower, 0o755)
        _mount(f"/proc/self/fd/{lower_fd}", lower, None, 0x1000 | MS_REC, None)
        os.close(lower_fd)
    _mount("overlay", root, "overlay", MS_NOSUID | MS_NODEV,
           f"lowerdir={lower},upperdir={upper},workdir={work}")
    for rel, data in p.files.items():
        path = os.path.join(root, rel.lstrip("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if os.path.islink(path):
            os.unlink(path)
        with open(path, "wb") as fh:
            fh.write(data)
        os.chmod(path, 0o644)
    tmp = os.path.join(root, "tmp")
    _make_point(root, tmp, True)
    _mount("tmpfs", tmp, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for m, fd, is_dir in fds:
        _bind_fd(root, m, fd, is_dir)
        os.close(fd)
    cfg = dict(p.config)
    cfg["root"] = {**cfg["root"], "path": root}
    fd = os.open(os.path.join(b, "config.json"), os.O_WRONLY | os.O_CREAT | os.O_EXCL
                 | os.O_CLOEXEC, 0o600)  # the job's environment: root only
    with os.fdopen(fd, "w") as fh:
        json.dump(cfg, fh)
    os.makedirs(p.state_root, mode=0o700, exist_ok=True)


def _make_point(root: str, path: str, is_dir: bool) -> None:
    """A mount point inside the overlay; symlinks on the way are replaced by directories
    (they would lead the bind elsewhere in the image, or out of it)."""
    rel = os.path.relpath(path, root)
    cur = root
    parts = rel.split(os.sep)
    for i, part in enumerate(parts):
        cur = os.path.join(cur, part)
        last = i == len(parts) - 1
        if os.path.islink(cur):
            os.unlink(cur)
        if last and not is_dir:
            if not os.path.exists(cur):
                open(cur, "a").close()
            return
        if not os.path.isdir(cur):
            if os.path.exists(cur):
                os.unlink(cur)
            os.mkdir(cur, 0o755)


def cleanup(runtime: str, state_root: str, ctr_id: str, cgroup_dirs: list[str]) -> None:
    """After the job: the runtime's record of a container whose runc was killed, and the
    empty cgroup directories runc made in hierarchies the job itself has none in."""
    if os.path.isdir(os.path.join(state_root, ctr_id)):
        import subprocess

        subprocess.run([runtime, "--root", state_root, "delete", "--force", ctr_id],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=30, check=False)
        shutil.rmtree(os.path.join(state_root, ctr_id), ignore_errors=True)
    try:  # a remap-root bundle's mount point (its tmpfs went with the job's namespace)
        os.rmdir(os.path.join(state_root, "bundles", ctr_id))
    except OSError:
        pass
    for d in sorted(cgroup_dirs, key=len, reverse=True):
        try:
            os.rmdir(d)
        except OSError:
            pass


def cgroup_mounts() -> list[str]:
    """Mount points of every cgroup hierarchy (v1 and v2) on this host."""
    out = []
    try:
        with open("/proc/self/mounts") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) > 2 and parts[2] in ("cgroup", "cgroup2"):
                    out.append(parts[1])
    except OSError:
        pass
    return out


def leftover_cgroups(cgroups_path: str, own: set[str]) -> list[str]:
    """The directories runc may have made for ``cgroups_path`` (``/<job rel>/ctr-<step>``)
    in every hierarchy, and the job-level parents it made where the job has none
    (``own``: the job's own directories, which its isolation removes)."""
    rel = cgroups_path.strip("/")
    if not rel:
        return []
    parent = os.path.dirname(rel)
    out = []
    for m in cgroup_mounts():
        out.append(os.path.join(m, rel))
        p = os.path.join(m, parent)
        if parent and p not in own:
            out.append(p)
    return out


_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
PR_SET_NO_NEW_PRIVS = 38


def enter_shared(p: ContainerPlan) -> str:
    """For an srun step: the container's root, set up once in this (root) step process
    for all its tasks on the node, which then ``chroot_task`` into it. They share one
    ``/tmp`` and ``/dev/shm`` (MPI's shared memory between ranks of a node works) as the
    tasks of one pyxis container do. Returns the root path."""
    enter(p)
    root = os.path.join(p.bundle, "root")
    for m in p.config["mounts"]:
        target = os.path.join(root, str(m["destination"]).lstrip("/"))
        kind = m["type"]
        opts = [str(o) for o in m.get("options") or []]
        flags = (MS_NOSUID if "nosuid" in opts else 0) | (MS_NODEV if "nodev" in opts else 0)
        flags |= 0x8 if "noexec" in opts else 0  # MS_NOEXEC
        if kind == "bind":
            _make_point(root, target, os.path.isdir(str(m["source"])))
            _mount(str(m["source"]), target, None, 0x1000 | MS_REC, None)  # MS_BIND
            if "ro" in opts or flags:
                _mount("none", target, None,
                       0x20 | 0x1000 | flags | (MS_RDONLY if "ro" in opts else 0), None)
            continue
        os.makedirs(target, exist_ok=True)
        data = ",".join(o for o in opts if "=" in o or o in ("newinstance",)) or None
        if kind == "sysfs":
            flags |= MS_RDONLY
        _mount(str(m.get("source") or kind), target, str(kind), flags, data)
        if m["destination"] == "/dev":
            for name in _DEVICES:
                node = os.path.join(target, name)
                open(node, "a").close()
                _mount(f"/dev/{name}", node, None, 0x1000, None)
            for name, link in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                               ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"),
                               ("ptmx", "pts/ptmx")):
                os.symlink(link, os.path.join(target, name))
            for sub in ("pts", "shm"):
                os.makedirs(os.path.join(target, sub), exist_ok=True)
            # a GPU step's devices (corral.agent.ocigpu): the host's nodes bound in, as
            # runc would create them
            for dev in p.config.get("linux", {}).get("devices") or ():
                path = str(dev["path"])
                if not path.startswith("/dev/") or ".." in path.split("/"):
                    continue
                node = os.path.join(target, path.removeprefix("/dev/"))
                os.makedirs(os.path.dirname(node), exist_ok=True)
                open(node, "a").close()
                _mount(path, node, None, 0x1000, None)  # MS_BIND
    if not p.writable:
        _mount("none", root, None, 0x20 | MS_RDONLY | MS_NOSUID | MS_NODEV, None)  # remount
    return root


def chroot_task(root: str, cwd: str) -> None:
    """In a task child of ``enter_shared``'s step process, still root: into the image
    (no privilege can come back: no-new-privileges, then the caller drops to the user)."""
    if _c().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise ContainerSetupError(err, f"prctl(NO_NEW_PRIVS): {os.strerror(err)}")
    os.chroot(root)
    os.chdir("/")
    try:
        os.chdir(cwd)
    except OSError:
        pass


def image_env(env: dict[str, str], p: ContainerPlan) -> dict[str, str]:
    """A task's environment with the image's variables on top (``--container-env`` names
    keep the job's value)."""
    out = dict(env)
    for item in p.image_env:
        name, sep, value = item.partition("=")
        if sep and name not in p.keep_env:
            out[name] = value
    if p.lib_path:  # a GPU step: the driver's libraries first (corral.agent.ocigpu)
        from corral.agent.ocigpu import prepend_path

        out["LD_LIBRARY_PATH"] = prepend_path(out.get("LD_LIBRARY_PATH", ""), p.lib_path)
    return out
