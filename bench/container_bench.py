"""Submit-to-start of a container job, cold and warm, against the bare runtimes started by
hand on the same image, in the same run.

Sides, one after the other in each round (the order rotates every round so drift on a
shared machine falls on all alike):

- **corral warm**: ``Client.submit`` of a job with ``--container-image`` of an image the
  node cache holds; start = the moment the job's first command inside the container
  writes a file (its mtime), measured from just before the submit call;
- **corral cold**: the same after the image was removed from the node cache (pulled from
  the loopback registry and unpacked again);
- **runc by hand**: ``runc run`` of a bundle on the same unpacked tree (the floor any
  OCI-runtime start pays; no scheduler, no cgroup of its own);
- **podman run**: ``podman run --rm`` of the same image from podman's own storage
  (``--network none``, runc, the host's ulimits in a private ``containers.conf``).

- **apptainer exec by hand** (where Apptainer is there: a real one, or Debian sid's
  through ``scripts/apptainer-sid``): ``apptainer exec`` of the same unpacked tree as a
  sandbox directory;
- **corral SIF warm**: a job whose image is a ``.sif`` built from the same image, run by
  the agent with Apptainer from its cached sandbox (the bench's jobs are root's, so this
  is Apptainer's privileged path, as the by-hand side).

Each side's start is the same command inside the container: ``touch $START_FILE``; the
mtime (nanoseconds) minus the wall clock just before the submit/exec is the
submit-to-start time. Results: ``bench/results/container_bench.{json,md}``.

Run (root; docker-registry, skopeo, runc, podman, busybox installed; Apptainer optional):
``.venv/bin/python bench/container_bench.py --warm 20 --cold 5`` (about a minute).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from corral.agent.images import ImageCache  # noqa: E402
from corral.client import Client  # noqa: E402
from corral.containers.spec import ContainerSpec, parse_image  # noqa: E402
from corral.core.model.job import JobSpec  # noqa: E402
from corral.submission import JobSubmission  # noqa: E402
from tests.apptainer import build_sif, find_apptainer  # noqa: E402
from tests.registry import running_registry  # noqa: E402

RESULTS = ROOT / "bench" / "results"
ENTRY = "from corral.cli.main import main; main()"
CONFIG = """
[controller]
schedule_delay_ms = 2
[agent]
heartbeat_s = 1
[[nodes]]
name = "bench"
discover = true
cpus = 8
mem_mb = 4000
[scheduler]
default_mem_per_cpu_mb = 100
[containers]
insecure_registries = ["{host}"]
cache_dir = "{cache}"
"""


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    k = (len(s) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def wait_file(path: Path, timeout_s: float = 60.0) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return os.stat(path).st_mtime_ns
        except FileNotFoundError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} never appeared") from None
            time.sleep(0.001)


class Bench:
    def __init__(self, work: Path, ref: str, cache: Path, client: Client,
                 podman_env: dict[str, str], apptainer: str = "", sif: str = "") -> None:
        self.work, self.ref, self.cache, self.client = work, ref, cache, client
        self.podman_env = podman_env
        self.spec = ContainerSpec(parse_image(ref)).to_text()
        self.sif_spec = ContainerSpec(parse_image(sif)).to_text() if sif else ""
        self.apptainer = apptainer
        self.n = 0

    def _file(self) -> Path:
        self.n += 1
        return self.work / f"start-{self.n}"

    def corral(self, sif: bool = False) -> float:
        f = self._file()
        sub = JobSubmission(spec=JobSpec(name="ctr", user="root", time_limit_s=60),
                            argv=("/bin/touch", str(f)), workdir=str(self.work),
                            env={"PATH": "/bin"}, stdout="/dev/null",
                            extra={"container": self.sif_spec if sif else self.spec})
        t0 = time.time_ns()
        jid = self.client.submit(sub)[0]
        start = wait_file(f)
        deadline = time.monotonic() + 60
        while self.client.job(jid)["state"] not in ("COMPLETED", "FAILED"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {jid} did not end")
            time.sleep(0.005)
        return (start - t0) / 1e9

    def evict(self) -> None:
        c = ImageCache(str(self.cache), 1 << 20)
        canonical = parse_image(self.ref).canonical
        for e in c.entries():  # the registry image only (the SIF's sandbox stays warm)
            if canonical in e["refs"] and not c.remove(e["digest"]):
                raise RuntimeError("the image is still in use")

    def runc(self, rootfs: str) -> float:
        f = self._file()
        b = Path(tempfile.mkdtemp(prefix="bundle-", dir=self.work))
        cfg = {"ociVersion": "1.0.2",
               "process": {"terminal": False, "args": ["/bin/touch", str(f)],
                           "env": ["PATH=/bin"], "cwd": "/", "user": {"uid": 0, "gid": 0}},
               "root": {"path": rootfs, "readonly": True},
               "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                          {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
                          {"destination": str(self.work), "type": "bind",
                           "source": str(self.work), "options": ["rbind", "rw"]}],
               "linux": {"namespaces": [{"type": "mount"}]}}
        (b / "config.json").write_text(json.dumps(cfg))
        t0 = time.time_ns()
        subprocess.run(["runc", "--root", str(self.work / "runc-state"), "run", "--bundle",
                        str(b), f"bench-{self.n}"], check=True, stdin=subprocess.DEVNULL)
        start = wait_file(f)
        shutil.rmtree(b, ignore_errors=True)
        return (start - t0) / 1e9

    def apptainer_exec(self, rootfs: str) -> float:
        f = self._file()
        t0 = time.time_ns()
        subprocess.run([self.apptainer, "-q", "exec", rootfs, "/bin/touch", str(f)],
                       check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, cwd=self.work)
        start = wait_file(f)
        return (start - t0) / 1e9

    def podman(self, image: str) -> float:
        f = self._file()
        t0 = time.time_ns()
        subprocess.run(["podman", "run", "--rm", "--pull=never", "--network", "none",
                        "-v", f"{self.work}:{self.work}", image, "/bin/touch", str(f)],
                       check=True, env=self.podman_env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL)
        start = wait_file(f)
        return (start - t0) / 1e9


def summary(xs: list[float]) -> dict[str, Any]:
    return {"n": len(xs), "p50_s": round(pct(xs, 0.5), 4), "p90_s": round(pct(xs, 0.9), 4),
            "min_s": round(min(xs), 4), "max_s": round(max(xs), 4),
            "runs_s": [round(x, 4) for x in xs]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warm", type=int, default=20)
    ap.add_argument("--cold", type=int, default=5)
    ap.add_argument("--out", default=str(RESULTS / "container_bench"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("container_bench: run as root")
    base = Path(tempfile.mkdtemp(prefix="corral-ctr-bench-", dir="/tmp"))
    os.chmod(base, 0o755)
    work = base / "work"
    work.mkdir()
    cache = base / "images"
    state = base / "state"
    pconf = base / "containers.conf"
    hn = subprocess.run(["sh", "-c", "ulimit -Hn"], capture_output=True, text=True).stdout
    pconf.write_text(f'[containers]\ndefault_ulimits = ["nofile={hn.strip()}:{hn.strip()}", '
                     '"nproc=32768:32768"]\nnetns = "none"\n[engine]\ncgroup_manager = '
                     '"cgroupfs"\nruntime = "runc"\nevents_logger = "file"\n')
    podman_env = dict(os.environ, CONTAINERS_CONF=str(pconf))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    results: dict[str, Any] = {}
    podman_image = ""
    with running_registry() as reg:
        ref = reg.push_busybox("bench/bb:1", os_name="bench")
        apptainer, why = find_apptainer()
        sif = ""
        if apptainer:
            sif = str(build_sif(apptainer, ref, base / "bench.sif"))
        else:
            print(f"container_bench: no Apptainer sides: {why}", file=sys.stderr)
        (base / "corral.toml").write_text(CONFIG.format(host=reg.host, cache=cache) + (
            f'apptainer = "{apptainer}"\n' if apptainer else ""))
        up = subprocess.run([sys.executable, "-c", ENTRY, "up", "--detach", "--state-dir",
                             str(state), "--config", str(base / "corral.toml"),
                             "--node-name", "bench"], env=env, capture_output=True,
                            text=True, timeout=120)
        if up.returncode != 0:
            sys.exit(f"corral up failed: {up.stderr}")
        try:
            podman_image = f"localhost/corral-bench-bb-{os.getpid()}:1"
            subprocess.run(["skopeo", "--insecure-policy", "copy", "--quiet",
                            "--src-tls-verify=false", ref,
                            f"containers-storage:{podman_image}"], check=True,
                           env=podman_env)
            with Client(socket_path=str(state / "corral.sock")) as client:
                deadline = time.monotonic() + 30
                while not client.nodes() or client.nodes()[0]["state"] != "IDLE":
                    if time.monotonic() > deadline:
                        sys.exit("the node did not come up")
                    time.sleep(0.05)
                b = Bench(work, ref, cache, client, podman_env, apptainer, sif)
                b.corral()  # warm-up: the image into the cache, the fork server warm
                if sif:
                    b.corral(sif=True)  # the SIF's sandbox into the cache
                rootfs = ImageCache(str(cache), 1 << 20).lookup(
                    parse_image(ref).canonical)
                assert rootfs is not None
                b.runc(rootfs.rootfs)
                b.podman(podman_image)
                sides: dict[str, list[float]] = {"corral_warm": [], "runc_by_hand": [],
                                                 "podman_run": [], "corral_cold": []}
                base_order = ["corral_warm", "runc_by_hand", "podman_run"]
                if apptainer:
                    b.apptainer_exec(rootfs.rootfs)
                    base_order += ["apptainer_exec", "corral_sif_warm"]
                    sides.update({"apptainer_exec": [], "corral_sif_warm": []})
                for i in range(max(args.warm, args.cold)):
                    k = i % len(base_order)
                    order = base_order[k:] + base_order[:k]
                    for side in order:
                        if i >= args.warm:
                            continue
                        if side == "corral_warm":
                            sides[side].append(b.corral())
                        elif side == "runc_by_hand":
                            sides[side].append(b.runc(rootfs.rootfs))
                        elif side == "apptainer_exec":
                            sides[side].append(b.apptainer_exec(rootfs.rootfs))
                        elif side == "corral_sif_warm":
                            sides[side].append(b.corral(sif=True))
                        else:
                            sides[side].append(b.podman(podman_image))
                    if i < args.cold:
                        b.evict()
                        sides["corral_cold"].append(b.corral())
                        rootfs = ImageCache(str(cache), 1 << 20).lookup(
                            parse_image(ref).canonical)
                        assert rootfs is not None
                results = {k: summary(v) for k, v in sides.items() if v}
        finally:
            subprocess.run([sys.executable, "-c", ENTRY, "down", "--state-dir", str(state)],
                           env=env, capture_output=True, timeout=60)
            if podman_image:
                subprocess.run(["podman", "rmi", "-f", podman_image], env=podman_env,
                               capture_output=True)
            for d in Path("/sys/fs/cgroup").glob("*/libpod_parent"):
                for sub in (d / "conmon", d):
                    try:
                        os.rmdir(sub)
                    except OSError:
                        pass
    shutil.rmtree(base, ignore_errors=True)
    warm, runc, podman = (results["corral_warm"]["p50_s"], results["runc_by_hand"]["p50_s"],
                          results["podman_run"]["p50_s"])
    out = {"machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                       "load_avg": os.getloadavg()},
           "image": "busybox-static tree, one layer (2 MB)", "sides": results,
           "ratios": {"corral_warm_p50_over_runc_p50": round(warm / runc, 2),
                      "corral_warm_p50_over_podman_p50": round(warm / podman, 2),
                      **({"corral_sif_warm_p50_over_apptainer_exec_p50": round(
                          results["corral_sif_warm"]["p50_s"]
                          / results["apptainer_exec"]["p50_s"], 2)}
                         if "apptainer_exec" in results else {})},
           "target": {"warm_p90_le_1s": results["corral_warm"]["p90_s"] <= 1.0},
           "command": "bench/container_bench.py " + " ".join(sys.argv[1:])}
    Path(args.out + ".json").write_text(json.dumps(out, indent=1) + "\n")
    rows = ["| side | n | p50 (s) | p90 (s) | min (s) | max (s) |", "|---|---|---|---|---|---|"]
    for k, v in results.items():
        rows.append(f"| {k} | {v['n']} | {v['p50_s']} | {v['p90_s']} | {v['min_s']} | "
                    f"{v['max_s']} |")
    r = out["ratios"]
    md = ("# Container job submit-to-start (bench/container_bench.py)\n\n" + "\n".join(rows)
          + f"\n\ncorral warm p50 / runc by hand p50: {r['corral_warm_p50_over_runc_p50']}x; "
          f"/ podman run p50: {r['corral_warm_p50_over_podman_p50']}x. "
          + (f"corral SIF warm p50 / apptainer exec p50: "
             f"{r['corral_sif_warm_p50_over_apptainer_exec_p50']}x. "
             if "corral_sif_warm_p50_over_apptainer_exec_p50" in r else "")
          + f"Load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}.\n")
    Path(args.out + ".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
