"""The node image cache: images unpacked once per node, shared by every user's jobs.

Layout under the cache directory (root-owned, 0755; the unpacked trees are read-only
lower layers of each job's overlay, ``corral.agent.container``)::

    refs/<sha256 of the reference>.json   {"ref": canonical, "digest": "sha256:..."}
    images/<hex digest>/rootfs/           the unpacked layers
    images/<hex digest>/image.json        the image config (Env, Entrypoint, Cmd, ...)
    images/<hex digest>/meta.json         {"digest", "refs", "size_bytes", "created"}
    images/<hex digest>/used              its mtime is the last use (LRU)
    locks/<name>.lock                     flock(2) files
    tmp/                                  pulls in progress (removed when they end)

Algorithm:

- **Content addressed.** An image is stored under its manifest digest. A reference
  (``docker://host/name:tag``) maps to a digest in ``refs/``; two tags of one image, or
  one image pulled by two jobs, are one tree.
- **Warm path.** ``resolve`` reads the ref record and stats the tree: no registry is
  contacted for a cached reference (podman's ``--pull=missing``); ``corral image pull``
  refreshes a tag.
- **One pull per reference.** A pull holds an exclusive flock on the reference's lock;
  a second job asking for it meanwhile waits on the lock, then finds the record. The
  unpack of a digest holds the digest's lock and renames a finished tree into place, so
  a crash leaves only ``tmp/`` debris (removed on the next pull).
- **In use.** A job holds a shared flock on ``images/<hex>/used`` while it runs; eviction
  takes it exclusively without waiting and skips trees that are busy.
- **LRU with a cap.** After each pull, trees are removed least recently used first while
  the total exceeds ``max_mb`` (never the one just pulled, never one in use).
- **Pulling** is ``skopeo copy docker://... oci:<tmp>`` (registries in ``insecure`` over
  plain HTTP without TLS verification), then the layers are applied in order with
  tarfile's ``tar`` filter (no absolute paths, nothing outside the tree, no setuid bits),
  OCI whiteouts (``.wh.NAME``, ``.wh..wh..opq``) honoured, device nodes skipped.

Errors are ``ImageError`` with a message fit for the job's end reason.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from corral.containers.spec import ImageRef

_WH = ".wh."
PROGRESS_S = 1.0  # how often a pull in progress reports the bytes it has
_OPAQUE = ".wh..wh..opq"


class ImageError(Exception):
    """An image that cannot be had: the message says why."""


@dataclass(frozen=True)
class Image:
    digest: str  # sha256:... ("" for a directory or bundle used in place)
    rootfs: str
    config: dict[str, Any]  # the image config's "config" object (Env, Cmd, WorkingDir...)
    ref: str
    cached: bool = True  # False: it was pulled for this request


def _hex(digest: str) -> str:
    return digest.split(":", 1)[-1]


def _dir_size(path: str) -> int:
    total = 0
    for dirpath, dirnames, filenames in os.walk(path):
        for name in filenames + dirnames:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            total += st.st_blocks * 512
    return total


class ImageCache:
    def __init__(self, root: str, max_mb: int = 20480, *,
                 insecure: tuple[str, ...] = (), skopeo: str = "skopeo",
                 pull_timeout_s: float = 900.0) -> None:
        self.root = os.path.abspath(root)
        self.max_bytes = max_mb * 1024 * 1024
        self.insecure = frozenset(insecure)
        self.skopeo = skopeo
        self.pull_timeout_s = pull_timeout_s
        for sub in ("refs", "images", "locks", "tmp"):
            os.makedirs(os.path.join(self.root, sub), mode=0o755, exist_ok=True)

    # ---- paths ---------------------------------------------------------------------------
    def _ref_path(self, canonical: str) -> str:
        h = hashlib.sha256(canonical.encode()).hexdigest()
        return os.path.join(self.root, "refs", f"{h}.json")

    def image_dir(self, digest: str) -> str:
        return os.path.join(self.root, "images", _hex(digest))

    @contextlib.contextmanager
    def _lock(self, name: str, *, shared: bool = False,
              cancelled: Callable[[], bool] | None = None) -> Iterator[None]:
        path = os.path.join(self.root, "locks", f"{name}.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
            deadline = time.monotonic() + self.pull_timeout_s
            while True:
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if cancelled is not None and cancelled():
                        raise ImageError("cancelled while waiting for another pull") from None
                    if time.monotonic() > deadline:
                        raise ImageError("timed out waiting for another pull of the "
                                         "image") from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)

    # ---- lookups -------------------------------------------------------------------------
    def lookup(self, canonical: str) -> Image | None:
        """The cached image of a reference, or None (no registry access)."""
        try:
            with open(self._ref_path(canonical)) as fh:
                rec = json.load(fh)
        except (OSError, ValueError):
            return None
        digest = str(rec.get("digest") or "")
        return self._load(digest, canonical) if digest else None

    def _load(self, digest: str, ref: str) -> Image | None:
        d = self.image_dir(digest)
        rootfs = os.path.join(d, "rootfs")
        try:
            with open(os.path.join(d, "image.json")) as fh:
                cfg = json.load(fh)
        except (OSError, ValueError):
            return None
        if not os.path.isdir(rootfs):
            return None
        return Image(digest, rootfs, cfg if isinstance(cfg, dict) else {}, ref)

    def touch(self, digest: str) -> None:
        used = os.path.join(self.image_dir(digest), "used")
        try:
            os.utime(used)
        except FileNotFoundError:
            with open(used, "a"):
                pass

    def pin(self, digest: str) -> int:
        """A shared lock on the image's tree for as long as the returned fd is open (the
        supervisor keeps it for the job's life): eviction leaves it alone. -1 when the
        tree is gone (evicted meanwhile)."""
        used = os.path.join(self.image_dir(digest), "used")
        try:
            fd = os.open(used, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return -1
        fcntl.flock(fd, fcntl.LOCK_SH)
        try:  # an eviction may have renamed the tree away between the open and the lock
            same = os.stat(used).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            return -1
        os.utime(used)
        return fd

    def acquire(self, ref: ImageRef, *, progress: Callable[[str], None] | None = None,
                cancelled: Callable[[], bool] | None = None) -> tuple[Image, int]:
        """``resolve`` plus ``pin``, without a window for an eviction between them: the
        image and the fd that keeps it (close it when the job is over)."""
        for _ in range(3):
            image = self.resolve(ref, progress=progress, cancelled=cancelled, evict=False)
            fd = self.pin(image.digest)
            if fd >= 0:
                self.evict(keep=image.digest)
                return image, fd
        raise ImageError(f"{ref.canonical} was evicted three times while being started")

    # ---- resolve / pull ------------------------------------------------------------------
    def resolve(self, ref: ImageRef, *, refresh: bool = False,
                progress: Callable[[str], None] | None = None,
                cancelled: Callable[[], bool] | None = None, evict: bool = True) -> Image:
        """The image of a registry reference: from the cache, else pulled (once, however
        many jobs ask at the same time)."""
        if ref.kind != "docker":
            raise ImageError(f"{ref.canonical} is not a registry image")
        if not refresh:
            hit = self.lookup(ref.canonical)
            if hit is not None:
                self.touch(hit.digest)
                return hit
        key = hashlib.sha256(ref.canonical.encode()).hexdigest()[:32]
        with self._lock(f"ref-{key}", cancelled=cancelled):
            if not refresh:
                hit = self.lookup(ref.canonical)
                if hit is not None:  # another job pulled it while we waited
                    self.touch(hit.digest)
                    return hit
            image = self._pull(ref, progress, cancelled)
        if evict:
            self.evict(keep=image.digest)
        return image

    def _pull(self, ref: ImageRef, progress: Callable[[str], None] | None,
              cancelled: Callable[[], bool] | None) -> Image:
        tmp = os.path.join(self.root, "tmp", uuid.uuid4().hex)
        os.mkdir(tmp, 0o700)
        try:
            layout = os.path.join(tmp, "oci")
            if progress:
                progress(f"pulling {ref.canonical}")
            self._skopeo_copy(ref, layout, cancelled, progress)
            manifest_digest, manifest = _read_layout(layout)
            with self._lock(f"img-{_hex(manifest_digest)[:32]}"):
                have = self._load(manifest_digest, ref.canonical)
                if have is None:
                    if progress:
                        progress(f"unpacking {ref.canonical}")
                    self._unpack(layout, manifest, manifest_digest, tmp)
                    have = self._load(manifest_digest, ref.canonical)
                    if have is None:
                        raise ImageError(f"unpacked {ref.canonical} but cannot read it back")
                    have = Image(have.digest, have.rootfs, have.config, have.ref, cached=False)
                self._add_ref(manifest_digest, ref.canonical)
            _write_json(self._ref_path(ref.canonical),
                        {"ref": ref.canonical, "digest": manifest_digest,
                         "pulled": time.time()})
            self.touch(manifest_digest)
            return have
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def _skopeo_copy(self, ref: ImageRef, layout: str,
                     cancelled: Callable[[], bool] | None,
                     progress: Callable[[str], None] | None = None) -> None:
        src = ref.canonical
        argv = [self.skopeo, "--insecure-policy", "copy", "--quiet"]
        if ref.registry in self.insecure:
            argv.append("--src-tls-verify=false")
        argv += [src, f"oci:{layout}:image"]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent"}
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=env, start_new_session=True)
        except FileNotFoundError:
            raise ImageError("cannot pull images: skopeo is not installed on this node") \
                from None
        deadline = time.monotonic() + self.pull_timeout_s
        next_report = time.monotonic() + PROGRESS_S
        while True:
            try:
                out, err = proc.communicate(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                if progress is not None and time.monotonic() >= next_report:
                    next_report = time.monotonic() + PROGRESS_S
                    got = _dir_size(layout) if os.path.isdir(layout) else 0
                    progress(f"pulling {src}: {got / 1048576:.1f} MB")
                if (cancelled is not None and cancelled()) or time.monotonic() > deadline:
                    proc.kill()
                    proc.communicate()
                    if cancelled is not None and cancelled():
                        raise ImageError(f"pull of {src} cancelled") from None
                    raise ImageError(f"pull of {src} timed out after "
                                     f"{self.pull_timeout_s:g} s") from None
        if proc.returncode != 0:
            text = (err or out).decode(errors="replace").strip().splitlines()
            why = text[-1] if text else f"skopeo exited with {proc.returncode}"
            why = why.removeprefix('time="').split('msg="', 1)[-1].rstrip('"')
            raise ImageError(f"cannot pull {src}: {why[:600]}")

    def _unpack(self, layout: str, manifest: dict[str, Any], digest: str, tmp: str) -> None:
        blobs = os.path.join(layout, "blobs")
        stage = os.path.join(tmp, "tree")
        rootfs = os.path.join(stage, "rootfs")
        os.makedirs(rootfs, mode=0o755)
        os.chmod(stage, 0o755)
        for layer in manifest.get("layers") or []:
            mt = str(layer.get("mediaType") or "")
            if "zstd" in mt:
                raise ImageError(f"layer media type {mt} (zstd) is not supported")
            apply_layer(_blob(blobs, str(layer.get("digest") or "")), rootfs)
        config: dict[str, Any] = {}
        cdesc = manifest.get("config") or {}
        if cdesc.get("digest"):
            try:
                with open(_blob(blobs, str(cdesc["digest"]))) as fh:
                    config = json.load(fh).get("config") or {}
            except (OSError, ValueError):
                config = {}
        _write_json(os.path.join(stage, "image.json"), config)
        _write_json(os.path.join(stage, "meta.json"),
                    {"digest": digest, "refs": [], "size_bytes": _dir_size(rootfs),
                     "created": time.time()})
        open(os.path.join(stage, "used"), "a").close()
        dest = self.image_dir(digest)
        shutil.rmtree(dest, ignore_errors=True)  # debris of an unpack that died
        os.rename(stage, dest)

    def _add_ref(self, digest: str, canonical: str) -> None:
        path = os.path.join(self.image_dir(digest), "meta.json")
        try:
            with open(path) as fh:
                meta = json.load(fh)
        except (OSError, ValueError):
            return
        refs = list(meta.get("refs") or [])
        if canonical not in refs:
            refs.append(canonical)
            meta["refs"] = refs
            _write_json(path, meta)

    # ---- listing and eviction ------------------------------------------------------------
    def entries(self) -> list[dict[str, Any]]:
        """Every cached image: digest, refs, size, last use (newest first)."""
        out: list[dict[str, Any]] = []
        base = os.path.join(self.root, "images")
        for name in os.listdir(base):
            d = os.path.join(base, name)
            try:
                with open(os.path.join(d, "meta.json")) as fh:
                    meta = json.load(fh)
                used = os.stat(os.path.join(d, "used")).st_mtime
            except (OSError, ValueError):
                continue
            out.append({"digest": str(meta.get("digest") or f"sha256:{name}"),
                        "refs": list(meta.get("refs") or []),
                        "size_bytes": int(meta.get("size_bytes") or 0),
                        "created": float(meta.get("created") or 0.0),
                        "last_used": used, "in_use": _busy(os.path.join(d, "used"))})
        out.sort(key=lambda e: -float(e["last_used"]))
        return out

    def evict(self, keep: str = "") -> list[str]:
        """Remove least recently used images until the cache fits ``max_mb``; returns
        the digests removed. Images in use (pinned) and ``keep`` stay."""
        entries = self.entries()
        total = sum(e["size_bytes"] for e in entries)
        removed: list[str] = []
        for e in sorted(entries, key=lambda e: float(e["last_used"])):
            if total <= self.max_bytes:
                break
            if e["digest"] == keep:
                continue
            if self.remove(e["digest"]):
                total -= e["size_bytes"]
                removed.append(e["digest"])
        return removed

    def remove(self, digest: str) -> bool:
        """Remove one image unless a job uses it; False when it is in use."""
        d = self.image_dir(digest)
        used = os.path.join(d, "used")
        try:
            fd = os.open(used, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            graveyard = os.path.join(self.root, "tmp", f"evict-{uuid.uuid4().hex}")
            os.rename(d, graveyard)
        finally:
            os.close(fd)
        for name in os.listdir(os.path.join(self.root, "refs")):
            p = os.path.join(self.root, "refs", name)
            try:
                with open(p) as fh:
                    if json.load(fh).get("digest") == digest:
                        os.unlink(p)
            except (OSError, ValueError):
                continue
        shutil.rmtree(graveyard, ignore_errors=True)
        return True


def _busy(path: str) -> bool:
    """A job holds the image (its shared lock on ``used``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _blob(blobs: str, digest: str) -> str:
    algo, _, h = digest.partition(":")
    if algo != "sha256" or len(h) != 64 or not all(c in "0123456789abcdef" for c in h):
        raise ImageError(f"bad blob digest {digest!r}")
    return os.path.join(blobs, algo, h)


def _read_layout(layout: str) -> tuple[str, dict[str, Any]]:
    """(manifest digest, manifest) of the one image in an OCI layout."""
    try:
        with open(os.path.join(layout, "index.json")) as fh:
            index = json.load(fh)
        desc = (index.get("manifests") or [])[0]
        digest = str(desc["digest"])
        with open(_blob(os.path.join(layout, "blobs"), digest)) as fh:
            manifest = json.load(fh)
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise ImageError(f"unreadable image layout: {exc}") from None
    if not isinstance(manifest, dict):
        raise ImageError("unreadable image manifest")
    return digest, manifest


def _write_json(path: str, data: Any) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _inside(root: str, rel: str) -> str:
    """``root/rel`` when it stays inside ``root`` with symlinks resolved, else raise."""
    path = os.path.join(root, rel)
    real_parent = os.path.realpath(os.path.dirname(path))
    if real_parent != root and not real_parent.startswith(root + os.sep):
        raise ImageError(f"layer entry {rel!r} leaves the image")
    return path


def apply_layer(blob: str, rootfs: str) -> None:
    """Apply one layer tarball (gzip or plain) onto ``rootfs``."""
    root = os.path.realpath(rootfs)
    try:
        tf = tarfile.open(blob, "r:*")
    except (OSError, tarfile.TarError) as exc:
        raise ImageError(f"unreadable layer: {exc}") from None
    with tf:
        members = []
        for m in tf:
            name = os.path.normpath(m.name.lstrip("/"))
            if name in (".", ""):
                continue
            if name == ".." or name.startswith("../"):
                raise ImageError(f"layer entry {m.name!r} leaves the image")
            base = os.path.basename(name)
            parent = os.path.dirname(name)
            if base == _OPAQUE:  # the directory's lower contents are gone
                d = _inside(root, parent) if parent else root
                if os.path.isdir(d) and not os.path.islink(d):
                    for child in os.listdir(d):
                        _remove(os.path.join(d, child))
                continue
            if base.startswith(_WH):
                _remove(_inside(root, os.path.join(parent, base[len(_WH):])))
                continue
            if m.ischr() or m.isblk():
                continue  # device nodes: the container's /dev is its own
            m.name = name
            members.append(m)
        for m in members:
            target = _inside(root, m.name)
            if os.path.lexists(target) and not (m.isdir() and os.path.isdir(target)
                                                and not os.path.islink(target)):
                _remove(target)
            try:
                tf.extract(m, root, numeric_owner=True, filter="tar")
            except (tarfile.TarError, OSError) as exc:
                raise ImageError(f"cannot unpack layer entry {m.name!r}: {exc}") from None
