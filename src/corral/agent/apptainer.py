"""Container jobs run by Apptainer: ``.sif`` images always, and registry images or root
filesystem directories where ``[containers] runtime = "apptainer"`` (or ``auto`` finds no
OCI runtime).

Policy:

- **As the user, unprivileged.** The job child drops to the job's uid, gid and groups
  *before* it starts ``apptainer exec``; Apptainer then runs in a user namespace of that
  user (never root for users), with no-new-privileges. It is started inside the job's
  cgroups with the job's CPU affinity, so memory, cores and pids limits hold inside; no
  ``--memory``/``--cpus`` is passed (Apptainer would make a cgroup of its own).
- **Sandbox directories, cached.** A SIF image is never mounted for a job (an
  unprivileged SIF mount needs squashfuse and ``/dev/fuse``, which many hosts keep
  0600). The agent unpacks it once into the node image cache (``corral.agent.images``)
  as a sandbox directory (``apptainer build --sandbox`` run as ``nobody``: a crafted
  squashfs cannot write where root could; the tree is made root's afterwards) stored
  under the sha256 of the SIF file: every user's job with
  the same SIF content shares that tree, it counts in the cache's LRU cap and shows in
  ``corral images``. The file is opened *by the user* (a child with the user's ids sends
  the descriptor back), copied into the cache while hashed (root converts its own copy:
  swapping the user's file afterwards changes nothing), and the tree loses setuid/setgid,
  sticky and group/other write bits and device nodes before it is renamed into place. A
  SIF whose path, inode, size, mtime and ctime are unchanged is not hashed again. A SIF
  that is not world-readable is not put where every user could read it: Apptainer runs
  that file itself, as the user (which needs squashfuse and a usable ``/dev/fuse``).
- Registry images come from the same cache (``skopeo`` pull, layers unpacked once by
  digest) and run as sandbox directories; their ``Env`` reaches the job through
  ``APPTAINERENV_*`` (names given with ``--container-env`` keep the job's value).
- Binds: home (``--no-home`` when the job or ``mount_home`` says no), the submit
  directory, ``default_mounts`` and ``--container-mounts`` (``ro`` kept). ``--writable``
  is ``--writable-tmpfs``. ``--container-remap-root`` is refused with Apptainer (a reason
  the job ends FAILED with); so is ``--container-name`` on a node without runc/crun
  (where there is one, a named container runs on the OCI path, as ``srun`` steps do).

The ``apptainer`` program is a real one found on ``PATH`` or ``[containers] apptainer``
(e.g. ``scripts/apptainer-sid``, Apptainer of a Debian sid root run with bubblewrap).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pwd
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from corral.agent import nvbind
from corral.agent.images import ImageCache, ImageError, _dir_size, _write_json
from corral.agent.launch import LaunchRequest
from corral.agent.runtimes import ContainerSettings
from corral.containers.spec import ContainerError, ContainerSpec, Mount, parse_mounts

_CHUNK = 1 << 20


class AptError(Exception):
    """Why an Apptainer job cannot start (its end reason; never the node's fault)."""


@dataclass
class AptPlan:
    argv: list[str]  # program, "exec", options, image, command...
    env: dict[str, str]
    uid: int
    gid: int
    groups: tuple[int, ...]
    cwd: str
    pin_fd: int = -1  # holds the cached tree for the job's life
    digest: str = ""
    pulled: bool = False  # pulled or unpacked for this job (a cold start)
    binds: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # for the job's stderr, as Apptainer's


def wanted(spec: ContainerSpec, settings: ContainerSettings) -> bool:
    """Apptainer runs this container: a SIF, or any image where it is the engine."""
    kind = spec.image.kind
    return kind == "sif" or (settings.engine == "apptainer" and kind in ("docker", "dir"))


def open_as_user(path: str, uid: int, gid: int, groups: tuple[int, ...]) -> int:
    """A read-only descriptor of ``path`` opened by a child with the user's identity."""
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            parent.close()
            if os.geteuid() == 0:
                os.setgroups(list(groups))
                os.setgid(gid)
                os.setuid(uid)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
                socket.send_fds(child, [b"ok"], [fd])
            except OSError as exc:
                child.send(f"{exc.strerror or exc}".encode()[:500])
            code = 0
        except BaseException:  # noqa: B036 - the parent reports "cannot open"
            code = 1
        finally:
            os._exit(code)
    child.close()
    try:
        msg, fds, _flags, _addr = socket.recv_fds(parent, 1024, 1)
    finally:
        parent.close()
        os.waitpid(pid, 0)
    if not fds:
        why = msg.decode(errors="replace") or "cannot open"
        raise AptError(f"SIF image {path}: {why} (as user {uid})")
    return fds[0]


def _stat_key(path: str, st: os.stat_result) -> str:
    return f"{path}|{st.st_dev}|{st.st_ino}|{st.st_size}|{st.st_mtime_ns}|{st.st_ctime_ns}"


_UNSAFE_BITS = 0o7022  # setuid, setgid, sticky, group and other write


def _strip(tree: str) -> None:
    """A tree root made from user data, shared by every user: no setuid/setgid bits, no
    device nodes, nothing group- or world-writable (a user could change the image under
    another user's job), as the layer unpack's ``tar`` filter does for registry images."""
    for dirpath, dirnames, filenames in os.walk(tree):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                os.unlink(p)
            elif not stat.S_ISLNK(st.st_mode) and st.st_mode & _UNSAFE_BITS:
                os.chmod(p, stat.S_IMODE(st.st_mode) & ~_UNSAFE_BITS)


def _lock(cache: ImageCache, name: str, timeout_s: float) -> int:
    fd = os.open(os.path.join(cache.root, "locks", f"{name}.lock"),
                 os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise AptError("timed out waiting for another unpack of the image") from None
            time.sleep(0.05)


def sif_sandbox(cache: ImageCache, settings: ContainerSettings, path: str, fd: int,
                progress: Callable[[str], None] | None = None) -> tuple[str, str, bool]:
    """``(digest, rootfs, unpacked now)`` of the SIF read from ``fd``."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise AptError(f"SIF image {path}: not a regular file")
    key = _stat_key(path, st)
    memo = os.path.join(cache.root, "refs",
                        "sif-" + hashlib.sha256(key.encode()).hexdigest()[:40] + ".json")
    digest = ""
    try:
        with open(memo) as fh:
            rec = json.load(fh)
        if rec.get("key") == key:
            digest = str(rec.get("digest") or "")
    except (OSError, ValueError):
        pass
    if digest:
        have = cache._load(digest, path)
        if have is not None:
            cache._add_ref(digest, path)
            return digest, have.rootfs, False
    tmp = os.path.join(cache.root, "tmp", uuid.uuid4().hex)
    os.mkdir(tmp, 0o700)
    try:
        copy = os.path.join(tmp, "image.sif")
        h = hashlib.sha256()
        with open(copy, "wb") as out:
            while True:
                chunk = os.read(fd, _CHUNK)
                if not chunk:
                    break
                h.update(chunk)
                out.write(chunk)
        digest = "sha256:" + h.hexdigest()
        lock = _lock(cache, f"img-{h.hexdigest()[:32]}", settings.pull_timeout_s)
        try:
            have = cache._load(digest, path)
            made = have is None
            if have is None:
                if progress:
                    progress(f"unpacking {path}")
                _unpack_sif(cache, settings, copy, digest, tmp)
                have = cache._load(digest, path)
                if have is None:
                    raise AptError(f"unpacked {path} but cannot read it back")
            cache._add_ref(digest, path)
        finally:
            os.close(lock)
        _write_json(memo, {"key": key, "digest": digest})
        return digest, have.rootfs, made
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _unpacker() -> tuple[int, int] | None:
    """The ids Apptainer unpacks SIFs with: ``nobody`` for a root agent (a crafted
    squashfs then cannot write outside what nobody may), else the agent's own."""
    if os.geteuid() != 0:
        return None
    try:
        pw = pwd.getpwnam("nobody")
        return pw.pw_uid, pw.pw_gid
    except KeyError:
        return 65534, 65534


def _unpack_sif(cache: ImageCache, settings: ContainerSettings, sif: str, digest: str,
                tmp: str) -> None:
    """``apptainer build --sandbox`` of root's copy of the SIF, unprivileged (in a work
    directory of the unpacking user inside the 0700 ``tmp``), then the tree is moved to
    a root-only place, owned by root and stripped before it goes into the cache."""
    ids = _unpacker()
    # the unpacker needs a way to its work directory: inside the cache's temp directory
    # where every directory above is searchable, else in the system's temp directory
    # (the tree is copied into the cache afterwards)
    base = tmp if ids is None or _searchable(tmp) else \
        tempfile.mkdtemp(prefix="corral-sif-", dir=tempfile.gettempdir())
    try:
        _unpack_in(cache, settings, sif, digest, tmp, base, ids)
    finally:
        if base != tmp:
            shutil.rmtree(base, ignore_errors=True)


def _searchable(path: str) -> bool:
    """Every directory above ``path`` lets others pass (o+x)."""
    d = os.path.dirname(os.path.abspath(path))
    while True:
        try:
            if not os.stat(d).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
        if d == "/":
            return True
        d = os.path.dirname(d)


def _copy_regular(src: str, dst: str) -> None:
    """copytree's file copy: regular files only (no fifo or socket is read or made)."""
    if stat.S_ISREG(os.lstat(src).st_mode):
        shutil.copy2(src, dst)


def _unpack_in(cache: ImageCache, settings: ContainerSettings, sif: str, digest: str,
               tmp: str, base: str, ids: tuple[int, int] | None) -> None:
    work = os.path.join(base, "unpack")
    os.mkdir(work, 0o700)
    copy = os.path.join(work, "image.sif")
    shutil.move(sif, copy)
    if ids is not None:
        os.chmod(base, 0o711)  # the unpacker passes through to its work directory only
        for path in (work, copy):
            os.chown(path, *ids)
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "CORRAL_APPTAINER_BINDS": cache.root, "HOME": work}
    built = os.path.join(work, "rootfs")
    try:
        res = subprocess.run([settings.apptainer, "-q", "build", "--force", "--sandbox",
                              built, copy], cwd=work, env=env, stdin=subprocess.DEVNULL,
                             capture_output=True, text=True,
                             timeout=settings.pull_timeout_s, check=False,
                             user=ids[0] if ids else None, group=ids[1] if ids else None,
                             extra_groups=[] if ids else None)
    except (OSError, subprocess.SubprocessError) as exc:
        raise AptError(f"cannot unpack the SIF image: {exc}") from None
    finally:
        os.chmod(base, 0o700)
    if res.returncode != 0 or not os.path.isdir(built):
        raise AptError(f"not a usable SIF image: {_why(res.stderr + res.stdout, res.returncode)}")
    stage = os.path.join(tmp, "tree")
    os.mkdir(stage, 0o755)
    rootfs = os.path.join(stage, "rootfs")
    if base == tmp:
        os.rename(built, rootfs)  # out of the unpacker's reach before it becomes root's
    else:
        os.chmod(work, 0o700)
        os.chown(work, 0, 0)  # first out of the unpacker's reach, then copied
        shutil.copytree(built, rootfs, symlinks=True, copy_function=_copy_regular)
    if ids is not None:
        for dirpath, dirnames, filenames in os.walk(rootfs):
            for name in dirnames + filenames:
                os.lchown(os.path.join(dirpath, name), 0, 0)
        os.lchown(rootfs, 0, 0)
    _strip(rootfs)
    os.chmod(rootfs, 0o755)
    _write_json(os.path.join(stage, "image.json"), {})
    _write_json(os.path.join(stage, "meta.json"),
                {"digest": digest, "refs": [], "size_bytes": _dir_size(rootfs),
                 "created": time.time(), "kind": "sif"})
    open(os.path.join(stage, "used"), "a").close()
    dest = cache.image_dir(digest)
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(stage, dest)


def _why(text: str, code: int) -> str:
    """The telling line of Apptainer's output (its FATAL/ERROR line, colours removed)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln).strip() for ln in text.splitlines()]
    lines = [ln for ln in lines if ln]
    bad = [ln for ln in lines if ln.startswith(("FATAL", "ERROR"))]
    pick = (bad or lines or [f"exit code {code}"])[-1]
    for prefix in ("FATAL:", "ERROR:"):
        pick = pick.removeprefix(prefix).strip()
    return pick[:400]


def presif(cache: ImageCache, path: str, program: str, uid: int | None,
           gid: int | None) -> str:
    """``corral image pull`` of a SIF: its sandbox into the cache ahead of the jobs,
    the file opened as the asking user (``uid``/``gid``; required); returns the digest.
    A file only its owner can read is not unpacked (its jobs run it directly)."""
    if uid is None or gid is None:
        raise AptError(f"{path}: no user to open the SIF as")
    if not program:
        raise AptError(f"{path} needs Apptainer, which this node does not have")
    try:
        groups = tuple(os.getgrouplist(pwd.getpwuid(uid).pw_name, gid))
    except KeyError:
        groups = (gid,)
    settings = ContainerSettings(apptainer=program, cache_dir=cache.root,
                                 pull_timeout_s=cache.pull_timeout_s)
    fd = open_as_user(path, uid, gid, groups)
    try:
        if not os.fstat(fd).st_mode & 0o004:
            raise AptError(f"SIF image {path} is readable by its owner only: not unpacked "
                           "into the shared cache")
        digest, _rootfs, _made = sif_sandbox(cache, settings, path, fd)
    finally:
        os.close(fd)
    cache.touch(digest)
    cache.evict(keep=digest)
    return digest


def _bind_arg(m: Mount) -> str:
    return f"{m.source}:{m.target}:{'ro' if m.readonly else 'rw'}"


def prepare(spec: ContainerSpec, req: LaunchRequest, settings: ContainerSettings, *,
            command: list[str], env: dict[str, str], groups: tuple[int, ...],
            progress: Callable[[str], None] | None = None,
            cancelled: Callable[[], bool] | None = None) -> AptPlan:
    """The image found (pulled or unpacked into the cache when missing) and the
    ``apptainer exec`` command line of the job; raises ``AptError`` with the reason."""
    if not settings.apptainer:
        raise AptError(f"{spec.image.canonical} needs Apptainer, which this node does not "
                       "have ([containers] apptainer, or apptainer on PATH)")
    if spec.name:
        raise AptError("--container-name needs an OCI runtime (runc or crun) on this node: "
                       "Apptainer cannot keep a named container's changes for later steps")
    if spec.remap_root:
        raise AptError("--container-remap-root is not supported with Apptainer images")
    ref = spec.image
    groups = groups or (req.gid,)
    cache = ImageCache(settings.cache_dir, settings.cache_max_mb, insecure=settings.insecure,
                       skopeo=settings.skopeo or "skopeo",
                       pull_timeout_s=settings.pull_timeout_s)
    pin, digest, pulled = -1, "", False
    image_env: list[str] = []
    entry: list[str] = []
    if ref.kind == "sif":
        fd = open_as_user(ref.canonical, req.uid, req.gid, groups)
        try:
            if os.fstat(fd).st_mode & 0o004:
                digest, image, pulled = sif_sandbox(cache, settings, ref.canonical, fd,
                                                    progress)
            else:  # private to its owner: not unpacked where every user can read it
                image = ref.canonical
        except OSError as exc:
            raise AptError(f"image cache {settings.cache_dir}: {exc}") from None
        finally:
            os.close(fd)
        if digest:
            pin = cache.pin(digest)
            cache.evict(keep=digest)
    elif ref.kind == "docker":
        try:
            img, pin = cache.acquire(ref, progress=progress, cancelled=cancelled)
        except ImageError as exc:
            raise AptError(f"image pull failed: {exc}") from None
        except OSError as exc:
            raise AptError(f"image cache {settings.cache_dir}: {exc}") from None
        image, digest, pulled = img.rootfs, img.digest, not img.cached
        image_env = [str(e) for e in img.config.get("Env") or []]
        if spec.entrypoint:
            entry = [str(a) for a in img.config.get("Entrypoint") or []]
    elif ref.kind == "dir":
        image = ref.canonical  # the user's own tree: Apptainer reads it as the user
    else:
        raise AptError(f"{ref.canonical}: Apptainer runs SIF images, registry images and "
                       "directories, not OCI bundles")
    if pin >= 0 and req.uid != 0 and not _searchable(image):
        os.close(pin)  # Apptainer reads the cached tree as the user, who cannot get there
        raise AptError(f"the image cache {settings.cache_dir} is not reachable by the job's "
                       "user: every directory above it must be searchable (chmod o+x) for "
                       "Apptainer jobs")
    try:
        defaults = tuple(m for text in settings.default_mounts for m in parse_mounts(text))
    except ContainerError as exc:
        if pin >= 0:
            os.close(pin)
        raise AptError(f"[containers] default_mounts: {exc}") from None
    opts: list[str] = []
    if not (spec.mount_home and settings.mount_home):
        opts.append("--no-home")
    binds = []
    if os.path.isdir(req.workdir) and req.workdir != "/":
        binds.append(f"{req.workdir}:{req.workdir}:rw")
    binds += [_bind_arg(m) for m in (*defaults, *spec.mounts)]
    warnings: list[str] = []
    if req.gpus:  # --nv: the host's driver files (its /dev is Apptainer's default /dev)
        nv = nvbind.discover(req.hidden_devices)
        if not nv.found:
            warnings.append(nvbind.NO_DRIVER)
        binds += [f"{host}:{inside}:ro" for host, inside in nv.files()]
    for b in binds:
        opts += ["--bind", b]
    opts += ["--pwd", spec.workdir or req.workdir]
    if spec.writable:
        opts.append("--writable-tmpfs")
    out_env = dict(env)
    for item in image_env:
        name, sep, value = item.partition("=")
        if sep and name not in spec.env and name.isidentifier():
            out_env[f"APPTAINERENV_{name}"] = value
    if ref.kind == "sif":  # --container-env: the job's value wins over %environment
        for name in spec.env:
            if name in env and name.isidentifier():
                out_env[f"APPTAINERENV_{name}"] = env[name]
    out_env["CORRAL_APPTAINER_BINDS"] = settings.cache_dir  # read by the sid wrapper only
    out_env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    # --container-entrypoint with a SIF: its %runscript, given the command (apptainer run)
    action = "run" if ref.kind == "sif" and spec.entrypoint else "exec"
    argv = [settings.apptainer, "-q", action, *opts, image, *entry, *command]
    return AptPlan(argv=argv, env=out_env, uid=req.uid, gid=req.gid, groups=groups,
                   cwd=req.workdir, pin_fd=pin, digest=digest, pulled=pulled, binds=binds,
                   warnings=warnings)
