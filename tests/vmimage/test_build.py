"""``corral image build-vm`` from the installed Debian packages: the archive the kernel
unpacks (read back with the real ``cpio`` tool), modules in dependency order, the ELF
kernel unpacked from the bzImage, and the manifest."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from corral.vmimage import cpio
from corral.vmimage.build import BuildError, module_order, newest_kernel, unpack_vmlinux
from corral.vmimage.manifest import ImageError, check_name, read_manifest, resolve


def _kernel() -> str:
    try:
        kernel = newest_kernel()
    except BuildError as exc:
        pytest.skip(str(exc))
    if not os.access(kernel, os.R_OK):
        pytest.skip(f"{kernel} is not readable")
    return kernel


@pytest.mark.skipif(shutil.which("cpio") is None, reason="cpio not installed")
def test_archive_reads_back_with_cpio(tmp_path: Path) -> None:
    blob = cpio.archive([cpio.directory("bin"), cpio.file("bin/hello", b"hi\n", 0o755),
                         cpio.symlink("bin/sh", "/bin/busybox"), cpio.chardev("null", 1, 3)])
    out = subprocess.run(["cpio", "-itv"], input=blob, capture_output=True, check=True)
    listing = out.stdout.decode()
    assert "bin/hello" in listing and "bin/sh -> /bin/busybox" in listing
    assert listing.splitlines()[1].startswith("-rwxr-xr-x")
    assert listing.splitlines()[3].startswith("crw-------")
    with pytest.raises(ValueError, match="repeated"):
        cpio.archive([cpio.directory("a"), cpio.directory("a")])


def test_module_order_puts_dependencies_first(tmp_path: Path) -> None:
    (tmp_path / "modules.dep").write_text(
        "kernel/fs/9p/9p.ko: kernel/net/9p/9pnet.ko kernel/fs/netfs/netfs.ko\n"
        "kernel/net/9p/9pnet.ko:\nkernel/fs/netfs/netfs.ko:\n"
        "kernel/net/9p/9pnet_virtio.ko: kernel/net/9p/9pnet.ko\n")
    (tmp_path / "modules.builtin").write_text("kernel/drivers/virtio/virtio_mmio.ko\n")
    order = module_order(str(tmp_path), ("virtio_mmio", "9pnet_virtio", "9p"))
    assert order == ["kernel/net/9p/9pnet.ko", "kernel/net/9p/9pnet_virtio.ko",
                     "kernel/fs/netfs/netfs.ko", "kernel/fs/9p/9p.ko"]
    with pytest.raises(BuildError, match="virtio_console"):
        module_order(str(tmp_path), ("virtio_console",))


def test_build_the_default_guest(tmp_path: Path) -> None:
    kernel = _kernel()
    target = tmp_path / "images" / "default"
    env = {**os.environ}
    out = subprocess.run([sys.executable, "-c",
                          "from corral.cli.main import main; main()", "image", "build-vm",
                          "--dir", str(tmp_path / "images"), "--kernel", kernel, "--json"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    man = read_manifest(str(target))
    assert man.kernel_version == os.path.basename(kernel)[len("vmlinuz-"):]
    assert (target / man.kernel).read_bytes()[:4] == b"\x7fELF"  # PVH-bootable ELF
    assert man.modules[-1] == "ext4.ko" and "virtio_console.ko" in man.modules
    assert man.modules.index("9pnet.ko") < man.modules.index("9p.ko")
    listing = subprocess.run(["cpio", "-it"], input=(target / "initrd.cpio").read_bytes(),
                             capture_output=True, check=True).stdout.decode().split()
    assert {"init", "bin/busybox", "bin/sh", "bin/su", "etc/corral/modules"} <= set(listing)
    img = resolve("", str(tmp_path / "images"), allow_paths=False)
    assert img.kernel == str(target / man.kernel) and img.initrd.endswith("initrd.cpio")
    with pytest.raises(ImageError, match="allow_user_images"):
        resolve("/data/x.qcow2", str(tmp_path / "images"), allow_paths=False)
    with pytest.raises(ImageError, match="no VM image"):
        resolve("other", str(tmp_path / "images"), allow_paths=False)


def test_unpack_vmlinux_of_garbage_is_none() -> None:
    assert unpack_vmlinux(b"\x00" * 1000) is None


def test_image_names() -> None:
    assert check_name("default") == "" and check_name("a.b-c_1") == "a.b-c_1"
    for bad in ("../x", "a/b", "/x.img", "/a,b.qcow2", "-x"):
        with pytest.raises(ImageError):
            check_name(bad)
