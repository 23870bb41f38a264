"""The node image cache: real pulls from a registry on loopback, concurrent pulls stored
once, LRU eviction at the cap with images in use kept, layers applied safely."""

from __future__ import annotations

import io
import multiprocessing
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.agent.images import ImageCache, ImageError, apply_layer
from corral.containers.spec import parse_image
from tests.registry import Registry, require_containers, running_registry


@pytest.fixture(scope="module")
def registry() -> Iterator[Registry]:
    require_containers()
    with running_registry() as reg:
        reg.push_busybox("c/one:1", os_name="one", filler_kb=3072)
        reg.push_busybox("c/two:1", os_name="two", filler_kb=3072)
        reg.push_busybox("c/three:1", os_name="three", filler_kb=3072)
        yield reg


def cache(root: Path, reg: Registry, max_mb: int = 1000) -> ImageCache:
    return ImageCache(str(root), max_mb, insecure=(reg.host,))


def _pull(args: tuple[str, str, str]) -> tuple[str, bool]:
    root, host, ref = args
    img = ImageCache(root, 1000, insecure=(host,)).resolve(parse_image(ref))
    return img.digest, img.cached


def test_pull_then_hit_and_two_tags_one_tree(tmp_path: Path, registry: Registry) -> None:
    c = cache(tmp_path, registry)
    ref = parse_image(registry.ref("c/one:1"))
    first = c.resolve(ref)
    assert not first.cached and (Path(first.rootfs) / "etc/os-release").read_text() \
        .startswith('NAME="one"')
    again = c.resolve(ref)
    assert again.cached and again.digest == first.digest
    [entry] = c.entries()
    assert entry["refs"] == [ref.canonical] and entry["size_bytes"] > 3 * 1024 * 1024


def test_concurrent_pulls_of_one_image_store_it_once(tmp_path: Path,
                                                     registry: Registry) -> None:
    ref = registry.ref("c/two:1")
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(4) as pool:
        got = pool.map(_pull, [(str(tmp_path), registry.host, ref)] * 4)
    digests = {d for d, _ in got}
    assert len(digests) == 1
    assert sum(1 for _, cached in got if not cached) == 1  # one pulled, three waited
    assert len(os.listdir(tmp_path / "images")) == 1
    assert os.listdir(tmp_path / "tmp") == []


def test_lru_eviction_at_the_cap_keeps_images_in_use(tmp_path: Path,
                                                     registry: Registry) -> None:
    c = cache(tmp_path, registry, max_mb=12)  # room for two 5 MiB images, not three
    one = c.resolve(parse_image(registry.ref("c/one:1")))
    two = c.resolve(parse_image(registry.ref("c/two:1")))
    pin = c.pin(one.digest)  # a job runs in "one", though "two" was used after it
    os.utime(Path(two.rootfs).parent / "used", (1, 1))
    os.utime(Path(one.rootfs).parent / "used", (0, 0))  # "one" is the LRU, but pinned
    try:
        three = c.resolve(parse_image(registry.ref("c/three:1")))
        kept = {e["digest"] for e in c.entries()}
        assert kept == {one.digest, three.digest}, kept  # "two": the LRU not in use
        assert c.lookup(registry.ref("c/two:1")) is None
        assert not c.remove(one.digest)  # in use: eviction leaves it
        assert any(e["in_use"] for e in c.entries() if e["digest"] == one.digest)
    finally:
        os.close(pin)
    assert c.remove(one.digest)
    assert {e["digest"] for e in c.entries()} == {three.digest}
    del two


def test_a_missing_image_is_an_error_with_the_registry_reason(tmp_path: Path,
                                                              registry: Registry) -> None:
    with pytest.raises(ImageError) as exc:
        cache(tmp_path, registry).resolve(parse_image(registry.ref("c/none:1")))
    assert "manifest unknown" in str(exc.value)
    assert os.listdir(tmp_path / "images") == [] and os.listdir(tmp_path / "tmp") == []


def _layer(path: Path, entries: list[tuple[str, bytes | None, str]]) -> Path:
    """A layer tarball: (name, data or None for a directory, symlink target or "")."""
    with tarfile.open(path, "w:gz") as tf:
        for name, data, link in entries:
            info = tarfile.TarInfo(name)
            if link:
                info.type, info.linkname = tarfile.SYMTYPE, link
                tf.addfile(info)
            elif data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(info)
            else:
                info.size, info.mode = len(data), 0o4755
                tf.addfile(info, io.BytesIO(data))
    return path


def test_layers_whiteouts_and_escapes(tmp_path: Path) -> None:
    root = tmp_path / "rootfs"
    root.mkdir()
    apply_layer(str(_layer(tmp_path / "l1.tgz", [
        ("etc", None, ""), ("etc/a", b"a", ""), ("etc/b", b"b", ""), ("opt", None, ""),
        ("opt/x", b"x", ""), ("usr/bin/tool", b"t", ""), ("link", None, "/etc")])), str(root))
    assert not (root / "usr/bin/tool").stat().st_mode & 0o4000  # setuid dropped
    apply_layer(str(_layer(tmp_path / "l2.tgz", [
        ("etc/.wh.a", b"", ""), ("opt/.wh..wh..opq", b"", ""), ("opt/y", b"y", "")])),
        str(root))
    assert sorted(os.listdir(root / "etc")) == ["b"]
    assert sorted(os.listdir(root / "opt")) == ["y"]
    for bad in ([("../evil", b"x", "")], [("link/passwd", b"x", "")]):
        with pytest.raises(ImageError):
            apply_layer(str(_layer(tmp_path / "bad.tgz", bad)), str(root))
    assert not (tmp_path / "evil").exists()


def test_a_slow_pull_reports_its_bytes_and_can_be_cancelled(tmp_path: Path) -> None:
    """A stand-in skopeo (a real process) that writes 1 MiB every 0.2 s into the layout:
    progress notes carry the growing size; cancelling kills it and cleans up."""
    fake = tmp_path / "skopeo"
    fake.write_text("#!/bin/sh\nfor last; do :; done\nd=${last#oci:}; d=${d%:image}\n"
                    "mkdir -p $d/blobs\ni=0\nwhile [ $i -lt 100 ]; do\n"
                    "  head -c 1048576 /dev/zero > $d/blobs/part$i; i=$((i+1)); sleep 0.2\n"
                    "done\n")
    fake.chmod(0o755)
    root = tmp_path / "cache"
    c = ImageCache(str(root), 100, skopeo=str(fake))
    notes: list[str] = []
    sizes: list[float] = []

    def progress(note: str) -> None:
        notes.append(note)
        if note.endswith(" MB"):
            sizes.append(float(note.rsplit(":", 1)[1].split()[0]))

    with pytest.raises(ImageError) as exc:
        c.resolve(parse_image("docker://r.invalid/x:1"), progress=progress,
                  cancelled=lambda: len(sizes) >= 3)
    assert "cancelled" in str(exc.value)
    assert notes[0] == "pulling docker://r.invalid/x:1"
    assert len(sizes) >= 3 and sizes == sorted(sizes) and sizes[-1] >= 1.0, notes
    assert os.listdir(root / "tmp") == [] and os.listdir(root / "images") == []
