"""A real image registry on loopback for the container tests (Debian's ``docker-registry``),
with images built here from ``busybox-static`` and pushed with skopeo.

No registry on the network is reachable in CI, so the tests start their own:
``docker-registry serve`` on 127.0.0.1 with a free port and a temp storage directory,
polled until ``/v2/`` answers; stopped by pid. Images are busybox trees (a file
``/etc/os-release`` that names the image, plus optional filler to give them a size)
tarred and pushed as one-layer images with ``skopeo copy tarball:... docker://...``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

NEEDS = ("docker-registry", "skopeo", "busybox")


def missing_tools() -> list[str]:
    search = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    out = [t for t in NEEDS if shutil.which(t, path=search) is None]
    if shutil.which("runc", path=search) is None and shutil.which("crun", path=search) is None:
        out.append("runc")
    return out


def require_containers() -> None:
    """Skip unless this machine can run the container tests (root, the tools)."""
    if os.geteuid() != 0:
        pytest.skip("container jobs need a root agent")
    lacking = missing_tools()
    if lacking:
        pytest.skip(f"not installed: {', '.join(lacking)} (scripts/system-deps)")
    with open(shutil.which("busybox") or "/bin/busybox", "rb") as fh:
        if b"ld-linux" in fh.read(4096):  # a dynamic busybox cannot run inside an image
            pytest.skip("busybox is not static: apt-get install busybox-static")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


Wrap = Callable[[list[str]], list[str]]  # a command as run where the registry is


def _here(argv: list[str]) -> list[str]:
    return argv


@dataclass
class Registry:
    host: str  # 127.0.0.1:PORT
    root: Path
    proc: subprocess.Popen[bytes]
    wrap: Wrap = _here  # pushes run there too (another network namespace)

    def ref(self, name: str) -> str:
        return f"docker://{self.host}/{name}"

    def push_busybox(self, name: str, *, os_name: str, filler_kb: int = 0,
                     extra: dict[str, bytes] | None = None,
                     modes: dict[str, int] | None = None,
                     config: dict[str, Any] | None = None) -> str:
        """Build a busybox image whose /etc/os-release says ``os_name`` (plus ``extra``
        files, then ``modes`` applied to paths in it), push it as ``name`` (repo:tag);
        returns its docker:// reference. ``config``: the image config's ``config``
        (``Entrypoint``, ``Cmd``, ``WorkingDir``, ``Env``), pushed from an OCI layout
        written here (skopeo's tarball source sets none)."""
        tree = Path(tempfile.mkdtemp(prefix="img-", dir=self.root))
        for d in ("bin", "etc", "tmp", "proc", "sys", "dev", "root", "home"):
            (tree / d).mkdir()
        busybox = shutil.which("busybox")
        assert busybox
        shutil.copy(busybox, tree / "bin" / "busybox")
        applets = subprocess.run([str(tree / "bin" / "busybox"), "--list"], check=True,
                                 capture_output=True, text=True).stdout.split()
        for a in applets:
            if a != "busybox":
                (tree / "bin" / a).symlink_to("busybox")
        (tree / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
        (tree / "etc" / "group").write_text("root:x:0:\n")
        (tree / "etc" / "os-release").write_text(f'NAME="{os_name}"\nID=corraltest\n')
        if filler_kb:
            (tree / "filler").write_bytes(os.urandom(filler_kb * 1024))
        for rel, data in (extra or {}).items():
            p = tree / rel.lstrip("/")
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        for rel, mode in (modes or {}).items():
            os.chmod(tree / rel.lstrip("/"), mode)
        tar = tree.with_suffix(".tar")
        subprocess.run(["tar", "-C", str(tree), "-cf", str(tar), "."], check=True)
        ref = self.ref(name)
        source = f"tarball:{tar}" if config is None else oci_layout(tar, config)
        subprocess.run(self.wrap(["skopeo", "--insecure-policy", "copy", "--quiet",
                                  "--dest-tls-verify=false", source, ref]), check=True,
                       capture_output=True)
        shutil.rmtree(tree, ignore_errors=True)
        shutil.rmtree(tar.with_suffix(".oci"), ignore_errors=True)
        tar.unlink()
        return ref

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def oci_layout(tar: Path, config: dict[str, Any]) -> str:
    """An OCI image layout beside ``tar`` (one uncompressed layer, that tarball) whose
    image config carries ``config``; returns skopeo's source name for it."""
    lay = tar.with_suffix(".oci")
    blobs = lay / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def blob(data: bytes) -> dict[str, Any]:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return {"digest": f"sha256:{digest}", "size": len(data)}

    layer = blob(tar.read_bytes())
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), "amd64")
    cfg = blob(json.dumps({"architecture": arch, "os": "linux", "config": config,
                           "rootfs": {"type": "layers",
                                      "diff_ids": [layer["digest"]]}}).encode())
    manifest = blob(json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **cfg},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer}]
    }).encode())
    (lay / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", **manifest,
        "annotations": {"org.opencontainers.image.ref.name": "img"}}]}))
    (lay / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    return f"oci:{lay}:img"


def _answers(url: str, wrap: Wrap) -> bool:
    if wrap is _here:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return True
        except OSError:
            return False
    return subprocess.run(wrap(["busybox", "wget", "-q", "-O", "/dev/null", url]),
                          capture_output=True).returncode == 0


@contextmanager
def running_registry(ip: str = "127.0.0.1", wrap: Wrap = _here) -> Iterator[Registry]:
    """A registry on ``ip`` (default loopback; ``wrap``: started, polled and pushed to
    through it, e.g. in a network namespace whose address ``ip`` is)."""
    root = Path(tempfile.mkdtemp(prefix="corral-registry-"))
    os.chmod(root, 0o755)
    port = free_port() if wrap is _here else 5000  # a namespace of its own: any port
    cfg = root / "config.yml"
    cfg.write_text(f"version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
                   f"    rootdirectory: {root}/data\nhttp:\n  addr: {ip}:{port}\n")
    log = open(root / "registry.log", "wb")
    proc = subprocess.Popen(wrap(["docker-registry", "serve", str(cfg)]), stdout=log,
                            stderr=log, stdin=subprocess.DEVNULL)
    reg = Registry(f"{ip}:{port}", root, proc, wrap)
    try:
        deadline = time.monotonic() + 20
        while not _answers(f"http://{ip}:{port}/v2/", wrap):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("docker-registry did not start: "
                                     + (root / "registry.log").read_text())
            time.sleep(0.02)
        yield reg
    finally:
        reg.stop()
        log.close()
        shutil.rmtree(root, ignore_errors=True)
