"""``corral image build-vm``: the default guest, built offline from installed Debian packages.

Inputs (nothing is downloaded): a kernel from ``linux-image-amd64`` (``/boot/vmlinuz-*``,
the newest unless one is named), its modules (``/lib/modules/<version>``) and a static
busybox (``busybox-static``). Output: an image directory

* ``vmlinux``: the kernel as an uncompressed ELF, unpacked from the bzImage (the payload
  after the first xz/zstd/gzip/lzma magic that decompresses to an ELF), so qemu boots it
  through its PVH entry point: no firmware, no real-mode setup, no decompression at
  boot. Kept as ``vmlinuz`` as well when the payload cannot be unpacked (zstd without a
  Python decoder): qemu then boots the bzImage the classic way, more slowly.
* ``initrd.cpio``: busybox, its applets as links, ``/init`` (``guestinit.INIT``) and the
  modules the guest needs (virtio-mmio, virtio console, 9p) with their dependencies from
  ``modules.dep``, listed in load order in ``/etc/corral/modules``;
* ``manifest.json`` (``manifest.py``).

The build is deterministic for the same inputs (archive entries sorted, dated 0). It writes
into a temporary directory next to the target and renames it into place, so a running job
never sees a half-written image.
"""

from __future__ import annotations

import gzip
import lzma
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from corral.vmimage import cpio
from corral.vmimage.guestinit import init_script
from corral.vmimage.manifest import Manifest, write_manifest

# what the guest loads: virtio over MMIO (microvm), serial ports, 9p over virtio
GUEST_MODULES = ("virtio_mmio", "virtio_pci", "virtio_console", "9pnet_virtio", "9p",
                 "virtio_blk", "crc32c_generic", "ext4")  # the last two: an image's disk
BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")
_DIRS = ("bin", "sbin", "dev", "etc", "etc/corral", "lib", "lib/modules", "proc", "root",
         "sys", "tmp", "usr", "usr/bin", "usr/sbin", "var", "run", "home")


class BuildError(RuntimeError):
    """The image cannot be built from what is installed here."""


def newest_kernel(boot: str = "/boot") -> str:
    try:
        names = [n for n in os.listdir(boot) if n.startswith("vmlinuz-")]
    except OSError as exc:
        raise BuildError(f"cannot list {boot}: {exc.strerror}") from None
    if not names:
        raise BuildError(f"no kernel in {boot} (install linux-image-amd64)")

    def key(name: str) -> list[int]:
        return [int(x) for x in re.findall(r"\d+", name)]

    return os.path.join(boot, max(names, key=key))


def kernel_version(kernel: str) -> str:
    """The version a ``/boot/vmlinuz-<version>`` file was installed as."""
    base = os.path.basename(kernel)
    if not base.startswith("vmlinuz-"):
        raise BuildError(f"cannot tell the version of {kernel}: name it vmlinuz-<version>")
    return base[len("vmlinuz-"):]


def unpack_vmlinux(bzimage: bytes) -> bytes | None:
    """The ELF kernel inside a bzImage, or None when its compression is not readable here."""
    for magic, opener in ((b"\xfd7zXZ\x00", "xz"), (b"\x1f\x8b\x08", "gz"),
                          (b"\x5d\x00\x00", "lzma")):
        start = bzimage.find(magic)
        while start >= 0:
            try:
                if opener == "xz":
                    out = lzma.LZMADecompressor(lzma.FORMAT_XZ).decompress(bzimage[start:])
                elif opener == "lzma":
                    out = lzma.LZMADecompressor(lzma.FORMAT_ALONE).decompress(bzimage[start:])
                else:
                    out = gzip.decompress(bzimage[start:])
            except (lzma.LZMAError, OSError, EOFError):
                out = b""
            if out[:4] == b"\x7fELF":
                return out
            start = bzimage.find(magic, start + 1)
    return None


def module_order(moddir: str, wanted: tuple[str, ...] = GUEST_MODULES) -> list[str]:
    """Module files (relative to ``moddir``) of ``wanted`` and what they depend on, each
    after its dependencies; modules built into the kernel (``modules.builtin``) are left
    out, modules that do not exist at all are an error."""
    deps: dict[str, list[str]] = {}
    try:
        with open(os.path.join(moddir, "modules.dep")) as fh:
            for line in fh:
                path, _, rest = line.partition(":")
                deps[path.strip()] = rest.split()
    except OSError as exc:
        raise BuildError(f"cannot read {moddir}/modules.dep: {exc.strerror}") from None
    builtin: set[str] = set()
    try:
        with open(os.path.join(moddir, "modules.builtin")) as fh:
            builtin = {_mod_name(line.strip()) for line in fh if line.strip()}
    except OSError:
        pass
    by_name = {_mod_name(p): p for p in deps}
    order: list[str] = []

    def visit(path: str, trail: tuple[str, ...]) -> None:
        if path in order:
            return
        if path in trail:
            raise BuildError(f"module dependency cycle at {path}")
        for dep in deps.get(path, []):
            visit(dep, trail + (path,))
        order.append(path)

    for name in wanted:
        key = name.replace("-", "_")
        if key in by_name:
            visit(by_name[key], ())
        elif key not in builtin:
            raise BuildError(f"kernel module {name} is neither in {moddir} nor built in")
    return order


def _mod_name(path: str) -> str:
    base = os.path.basename(path)
    return base.split(".ko")[0].replace("-", "_")


def _module_bytes(path: str) -> bytes:
    data = Path(path).read_bytes()
    if path.endswith(".xz"):
        return lzma.decompress(data)
    if path.endswith(".gz"):
        return gzip.decompress(data)
    if path.endswith(".zst"):
        zstd = shutil.which("zstd")
        if zstd is None:
            raise BuildError(f"{path} is zstd-compressed and zstd is not installed")
        return subprocess.run([zstd, "-dc", path], capture_output=True, check=True).stdout
    return data


def busybox_applets(busybox: str) -> list[str]:
    out = subprocess.run([busybox, "--list-full"], capture_output=True, text=True,
                         check=False, timeout=30)
    if out.returncode != 0:
        raise BuildError(f"{busybox} --list-full failed: is it busybox-static?")
    return sorted({line.strip() for line in out.stdout.splitlines() if line.strip()})


def _is_static(path: str) -> bool:
    with open(path, "rb") as fh:
        head = fh.read(1 << 20)
    return b"/lib64/ld-linux" not in head and b"/lib/ld-linux" not in head


def initramfs(busybox: str, moddir: str, modules: list[str]) -> bytes:
    """The initramfs archive: directories, busybox and its applet links, /init, modules."""
    entries = [cpio.directory(d) for d in _DIRS]
    entries.append(cpio.chardev("dev/console", 5, 1))
    entries.append(cpio.chardev("dev/null", 1, 3, 0o666))
    entries.append(cpio.file("bin/busybox", Path(busybox).read_bytes(), 0o755))
    for applet in busybox_applets(busybox):
        rel = applet.lstrip("/")
        if rel in ("bin/busybox", "init", "linuxrc") or "/" not in rel:
            continue
        if os.path.dirname(rel) not in _DIRS:
            continue
        entries.append(cpio.symlink(rel, "/bin/busybox"))
    entries.append(cpio.file("init", init_script().encode(), 0o755))
    lines = []
    moddirs: set[str] = set()
    for rel in modules:
        name = rel[:-3] if rel.endswith((".xz", ".gz")) else rel
        name = name[:-4] if name.endswith(".zst") else name
        parent = os.path.dirname(name)
        parts = parent.split("/")
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            if sub and sub not in moddirs:
                moddirs.add(sub)
                entries.append(cpio.directory(f"lib/modules/{sub}"))
        entries.append(cpio.file(f"lib/modules/{name}", _module_bytes(os.path.join(moddir, rel))))
        lines.append(name)
    entries.append(cpio.file("etc/corral/modules", ("\n".join(lines) + "\n").encode()))
    return cpio.archive(entries)


def build_vm_image(target: str, *, kernel: str | None = None, busybox: str | None = None,
                   modules_root: str = "/lib/modules", name: str = "default") -> Manifest:
    """Build the default guest into the directory ``target`` (replaced if it exists)."""
    kernel = kernel or newest_kernel()
    version = kernel_version(kernel)
    moddir = os.path.join(modules_root, version)
    if not os.path.isdir(moddir):
        raise BuildError(f"no modules for kernel {version} in {modules_root}")
    bb = busybox or next((p for p in BUSYBOX_CANDIDATES if os.path.exists(p)), None)
    if bb is None:
        raise BuildError("no busybox found (install busybox-static)")
    if not _is_static(bb):
        raise BuildError(f"{bb} is dynamically linked: the guest needs busybox-static")
    try:
        bz = Path(kernel).read_bytes()
    except OSError as exc:
        raise BuildError(f"cannot read {kernel}: {exc.strerror} (run as root?)") from None
    order = module_order(moddir)
    parent = os.path.dirname(os.path.abspath(target)) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".build-", dir=parent)
    try:
        elf = unpack_vmlinux(bz)
        if elf is not None:
            kname = "vmlinux"
            Path(tmp, kname).write_bytes(elf)
        else:
            kname = "vmlinuz"
            Path(tmp, kname).write_bytes(bz)
        Path(tmp, "initrd.cpio").write_bytes(initramfs(bb, moddir, order))
        man = Manifest(name=name, kernel=kname, initrd="initrd.cpio",
                       kernel_version=version, created=time.time(),
                       modules=tuple(os.path.basename(m) for m in order))
        write_manifest(tmp, man)
        for entry in os.listdir(tmp):
            os.chmod(os.path.join(tmp, entry), 0o644)
        os.chmod(tmp, 0o755)
        old = None
        if os.path.exists(target):
            old = tempfile.mkdtemp(prefix=".old-", dir=parent)
            os.rename(target, os.path.join(old, "image"))
        os.rename(tmp, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return man
