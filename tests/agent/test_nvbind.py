"""``--nv`` for Apptainer jobs (``corral.agent.nvbind``): what a GPU job's container gets
from the host, decided from a linker cache's text and a device list (no GPU needed)."""

from __future__ import annotations

from corral.agent import nvbind

LDCONFIG = """\
1234 libs found in cache `/etc/ld.so.cache'
\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1
\tlibnvidia-ml.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1
\tlibnvidia-ml.so.1 (libc6) => /usr/lib/i386-linux-gnu/libnvidia-ml.so.1
\tlibnvidia-ml.so (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnvidia-ml.so
\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1
\tlibcuda.so.1 (libc6,x86-64) => /usr/local/old/libcuda.so.1
\tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda/lib64/libcudart.so.12
\tlibnvidia-ptxjitcompiler.so.1 (libc6,x86-64, OS ABI: Linux 3.2.0) => \
/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1
\tlibGLX_nvidia.so.0 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libGLX_nvidia.so.0
\tlibcuda.so.1 (libc6,AArch64) => /usr/lib/aarch64-linux-gnu/libcuda.so.1
"""
DEVICES = ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidiactl",
           "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
           "/dev/nvidia-caps", "/dev/nvidia-caps/nvidia-cap1", "/dev/null", "/dev/nvme0"]


def test_parse_ldconfig() -> None:
    rows = nvbind.parse_ldconfig(LDCONFIG)
    assert rows[0] == ("libz.so.1", "libc6,x86-64", "/lib/x86_64-linux-gnu/libz.so.1")
    assert ("libnvidia-ptxjitcompiler.so.1", "libc6,x86-64, OS ABI: Linux 3.2.0",
            "/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1") in rows
    assert len(rows) == 10  # the header line is not an entry


def test_driver_libraries_of_this_word_size_once_each() -> None:
    libs = nvbind.select_libs(nvbind.parse_ldconfig(LDCONFIG), "x86_64")
    assert libs == [
        ("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "/.singularity.d/libs/libnvidia-ml.so.1"),
        ("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so", "/.singularity.d/libs/libnvidia-ml.so"),
        ("/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/.singularity.d/libs/libcuda.so.1"),
        ("/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1",
         "/.singularity.d/libs/libnvidia-ptxjitcompiler.so.1"),
        ("/usr/lib/x86_64-linux-gnu/libGLX_nvidia.so.0",
         "/.singularity.d/libs/libGLX_nvidia.so.0")]
    # the CUDA runtime is the image's, not the driver's: never bound
    assert not [p for p, _ in libs if "cudart" in p]
    arm = nvbind.select_libs(nvbind.parse_ldconfig(LDCONFIG), "aarch64")
    assert arm == [("/usr/lib/aarch64-linux-gnu/libcuda.so.1",
                    "/.singularity.d/libs/libcuda.so.1")]


def test_devices_are_the_jobs_gpus_and_the_control_files_only() -> None:
    got = nvbind.select_devices(DEVICES, ("/dev/nvidia0", "/dev/nvidia2"))
    assert got == ["/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-modeset", "/dev/nvidia-uvm",
                   "/dev/nvidia-uvm-tools", "/dev/nvidia1", "/dev/nvidiactl"]
    assert "/dev/nvidia0" in nvbind.select_devices(DEVICES, ())


def test_plan_with_a_driver_and_without_one() -> None:
    nv = nvbind.plan(LDCONFIG, DEVICES, {"nvidia-smi": "/usr/bin/nvidia-smi"},
                     ("/dev/nvidia1",), "x86_64")
    assert nv.found and ("/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi") in nv.bins
    assert "/dev/nvidia1" not in nv.devices and "/dev/nvidia0" in nv.devices
    assert nv.files() == nv.libs + nv.bins
    # no driver library: nothing bound, not even device files or programs (a warning)
    bare = nvbind.plan("\tlibz.so.1 (libc6,x86-64) => /lib/libz.so.1\n", DEVICES,
                       {"nvidia-smi": "/usr/bin/nvidia-smi"}, (), "x86_64")
    assert bare == nvbind.NvBinds() and not bare.found
    assert "no NVIDIA driver" in nvbind.NO_DRIVER


def test_discover_on_this_host_finds_no_driver() -> None:
    """This machine has no NVIDIA driver: discovery says so (the no-driver path)."""
    assert not nvbind.discover(()).found
