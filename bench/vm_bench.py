"""Host, container and VM jobs on one node in one run: submit-to-first-instruction latency
and the runtime overhead on a CPU-bound and a memory-bandwidth-bound program.

    .venv/bin/python bench/vm_bench.py [--repeat 5] [--runs 3] [--out bench/results/vm_bench.json]

A real one-node cluster (``corral up`` in a temporary state directory). Every job is an
ordinary submission (``sbatch`` options through ``parse_sbatch``): the host job as is, the
container job with ``--container-image=<a busybox root directory>`` (issue 13), the VM
job with ``--vm`` (the default guest, built here by ``build_vm_image``).

* **Latency**: the job's first command creates a file in the working directory (for the
  VM, through the 9p share; for the container, through its bind mount); the latency is
  the file's modification time (set by the host's file system) minus the time just
  before the submit call. p50/p90 over ``--repeat`` jobs of each runtime, one at a time.
* **Overhead**: static C programs (compiled here with ``gcc -static``) time themselves:
  a dependent floating-point loop (CPU-bound) and the STREAM triad over 3 x 32 MiB arrays
  (memory-bound, best of 5 passes). Median of ``--runs`` jobs per runtime; the overhead is
  against the host job's median in the same run. The reference is the seed's table: VMs
  5-15 %, containers < 2 %.

The accelerator is KVM when ``/dev/kvm`` can run the stock kernel, else qemu's TCG
emulator (recorded in the results as ``accel`` with the reason): TCG numbers measure the
path, not what a VM costs on a KVM host.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ENTRY = "from corral.cli.main import main; main()"

CPU_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 100000000L;
    struct timespec a, b;
    double s = 1.0;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) { s = s * 0.9999999 + 1e-9 * (double)(i & 1023); }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("cpu_s=%.6f check=%g\n", (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9, s);
    return 0;
}
"""

STREAM_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#define N (4L * 1024 * 1024)
static double a[N], b[N], c[N];
static double now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9;
}
int main(void) {
    for (long i = 0; i < N; i++) { a[i] = 0; b[i] = 1.0; c[i] = 2.0; }
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        for (long i = 0; i < N; i++) a[i] = b[i] + 3.0 * c[i];
        double t = now() - t0;
        if (t < best) best = t;
    }
    printf("triad_mb_s=%.1f check=%g\n", 3.0 * sizeof(double) * N / best / 1e6, a[N / 2]);
    return 0;
}
"""

CONFIG = """
[controller]
schedule_delay_ms = 2
tick_s = 1
kill_grace_s = 5
min_job_age_s = 3600

[agent]
heartbeat_s = 0.5

[[nodes]]
name = "benchnode"
discover = true
cpus = {cpus}
mem_mb = {mem_mb}
features = ["vm"]

[vm]
image_dir = "{image_dir}"
mem_overhead_mb = 64
{accel}
"""


def corral(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", ENTRY, *args], capture_output=True,
                          text=True, timeout=timeout)


def compile_static(src: str, out: Path) -> None:
    c = out.with_suffix(".c")
    c.write_text(src)
    subprocess.run(["gcc", "-O2", "-static", "-o", str(out), str(c)], check=True)


def busybox_root(root: Path) -> Path:
    """A directory image: static busybox and its applets (issue 13's ``dir`` images)."""
    rootfs = root / "rootfs"
    for d in ("bin", "dev", "etc", "proc", "sys", "tmp", "usr/bin", "sbin", "usr/sbin"):
        (rootfs / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2("/bin/busybox", rootfs / "bin" / "busybox")
    out = subprocess.run(["/bin/busybox", "--list-full"], capture_output=True, text=True,
                         check=True).stdout.split()
    for rel in out:
        dest = rootfs / rel
        if rel.count("/") and dest.parent.is_dir() and not dest.exists():
            dest.symlink_to("/bin/busybox")
    (rootfs / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    return rootfs


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


class Bench:
    def __init__(self, root: Path, rootfs: Path | None) -> None:
        from corral.client import Client

        self.root = root
        self.work = root / "work"
        self.rootfs = rootfs
        self.state = root / "state"
        self.client = Client(socket_path=str(self.state / "corral.sock"))

    def submission(self, runtime: str, cmd: str, cpus: int, mem_mb: int) -> dict[str, Any]:
        from corral.frontends.context import local_context
        from corral.frontends.slurm_options import parse_sbatch

        argv = ["-c", str(cpus), "--mem", str(mem_mb), "-t", "30", "-D", str(self.work),
                "-o", str(self.work / "%j.out")]
        if runtime == "vm":
            argv.append("--vm")
        elif runtime == "container":
            assert self.rootfs is not None
            argv.append(f"--container-image={self.rootfs}")
        argv += ["--wrap", cmd]
        return parse_sbatch(argv, local_context("sbatch")).submission.to_json()

    def run(self, runtime: str, cmd: str, cpus: int = 1, mem_mb: int = 512,
            timeout_s: float = 600) -> tuple[int, float, dict[str, Any]]:
        t0 = time.time()
        jid = int(self.client.submit_result(self.submission(runtime, cmd, cpus, mem_mb))
                  ["job_ids"][0])
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.client.job(jid)
            if job["state"] not in ("PENDING", "RUNNING", "COMPLETING"):
                return jid, t0, job
            if time.monotonic() > deadline:
                self.client.cancel([jid])
                raise RuntimeError(f"{runtime} job {jid} did not finish in {timeout_s} s")
            time.sleep(0.01)

    def latency(self, runtime: str) -> float:
        jid, t0, job = self.run(runtime, ": > first.$SLURM_JOB_ID; true")
        if job["state"] != "COMPLETED":
            raise RuntimeError(f"{runtime} job {jid}: {job['state']} {job.get('end_reason')}: "
                               + (self.work / f"{jid}.out").read_text()[-2000:])
        return (self.work / f"first.{jid}").stat().st_mtime - t0

    def measure(self, runtime: str, program: str, key: str) -> float:
        jid, _, job = self.run(runtime, f"{self.work / program}")
        text = (self.work / f"{jid}.out").read_text()
        if job["state"] != "COMPLETED":
            raise RuntimeError(f"{runtime} {program} job {jid}: {job['state']}: {text[-2000:]}")
        for word in text.split():
            if word.startswith(key + "="):
                return float(word.split("=", 1)[1])
        raise RuntimeError(f"no {key} in {text!r}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=5, help="latency jobs per runtime")
    p.add_argument("--runs", type=int, default=3, help="overhead jobs per runtime and program")
    p.add_argument("--out", default="bench/results/vm_bench.json")
    p.add_argument("--no-container", action="store_true")
    args = p.parse_args()

    from corral.agent.vm.discover import kvm_problem
    from corral.vmimage.build import build_vm_image

    problem = kvm_problem()
    root = Path(tempfile.mkdtemp(prefix="corral-vmbench-", dir="/tmp"))
    os.chmod(root, 0o755)
    (root / "work").mkdir()
    os.chmod(root / "work", 0o777)
    build_vm_image(str(root / "images" / "default"))
    compile_static(CPU_C, root / "work" / "cpu")
    compile_static(STREAM_C, root / "work" / "stream")
    runtimes = ["host", "vm"] if args.no_container else ["host", "container", "vm"]
    rootfs = None if args.no_container else busybox_root(root)
    accel = 'accel = "tcg"\ncpu = "max"\nmachine = "q35"' if problem else ""
    ncpu = os.cpu_count() or 1
    (root / "corral.toml").write_text(CONFIG.format(
        cpus=ncpu, mem_mb=4096, image_dir=root / "images", accel=accel))
    up = corral("up", "--detach", "--state-dir", str(root / "state"), "--config",
                str(root / "corral.toml"), "--node-name", "benchnode", timeout=120)
    if up.returncode != 0:
        raise SystemExit(f"corral up failed: {up.stderr}")
    results: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": f"{platform.node()} {ncpu} CPUs, kernel {platform.release()}",
        "accel": "kvm" if not problem else "tcg",
        "accel_reason": problem or "KVM usable",
        "load_before": os.getloadavg(),
        "repeat": args.repeat, "runs": args.runs,
        "latency_s": {}, "cpu_s": {}, "triad_mb_s": {},
    }
    try:
        b = Bench(root, rootfs)
        b.latency("host")  # warm-up (first job of the cluster)
        for rt in runtimes:
            lat = [b.latency(rt) for _ in range(args.repeat)]
            results["latency_s"][rt] = {"p50": pct(lat, 0.5), "p90": pct(lat, 0.9),
                                        "all": lat}
            print(f"{rt:9} submit-to-first-instruction p50 {pct(lat, 0.5):.3f} s "
                  f"p90 {pct(lat, 0.9):.3f} s", flush=True)
        for rt in runtimes:
            cpu = [b.measure(rt, "cpu", "cpu_s") for _ in range(args.runs)]
            tri = [b.measure(rt, "stream", "triad_mb_s") for _ in range(args.runs)]
            results["cpu_s"][rt] = {"median": statistics.median(cpu), "all": cpu}
            results["triad_mb_s"][rt] = {"median": statistics.median(tri), "all": tri}
            print(f"{rt:9} cpu loop {statistics.median(cpu):.3f} s, STREAM triad "
                  f"{statistics.median(tri):.0f} MB/s", flush=True)
        host_cpu = results["cpu_s"]["host"]["median"]
        host_tri = results["triad_mb_s"]["host"]["median"]
        results["overhead_pct"] = {
            rt: {"cpu": round(100 * (results["cpu_s"][rt]["median"] / host_cpu - 1), 1),
                 "memory": round(100 * (1 - results["triad_mb_s"][rt]["median"] / host_tri), 1)}
            for rt in runtimes if rt != "host"}
        results["reference_pct"] = {"vm": "5-15", "container": "<2"}
        results["load_after"] = os.getloadavg()
    finally:
        corral("down", "--state-dir", str(root / "state"), timeout=60)
        shutil.rmtree(root, ignore_errors=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps({k: results[k] for k in ("accel", "overhead_pct")}, indent=1))
    print(f"results in {out}")


if __name__ == "__main__":
    main()
