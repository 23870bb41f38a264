"""Device check (not collected by pytest): the agent's GPU metrics on a real NVIDIA GPU.

Run on a GPU machine as ``PYTHONPATH=src python3 tests/ops/gpu_check.py [OUT_DIR]``: a job
process (under a stand-in supervisor, in a spool the collector reads) keeps GPU 0 busy with
PyTorch matrix products; the collector is scraped over HTTP through real NVML for a few
seconds. Prints PASS/FAIL/INFO lines and the metrics it saw; exits non-zero on failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from corral.agent import spool
from corral.agent.launch import LaunchRequest
from corral.agent.proctree import start_ticks
from corral.ops.agent_metrics import AgentCollector, serve

WORK = ("import torch, time\n"
        "a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16)\n"
        "print('ready', flush=True)\n"
        "end = time.time() + 25\n"
        "while time.time() < end:\n"
        "    for _ in range(50): b = a @ a\n"
        "    torch.cuda.synchronize()\n")
SUP = ("import subprocess, sys\n"
       f"p = subprocess.Popen([sys.executable, '-c', {WORK!r}])\n"
       "print(p.pid, flush=True)\n"
       "p.wait()\n")


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    failures = 0
    state = Path(tempfile.mkdtemp(prefix="corral-gpucheck-"))
    jdir = spool.job_dir(state, 5)
    jdir.mkdir(parents=True)
    req = LaunchRequest(job_id=5, name="gpu", user="root", uid=0, gid=0, workdir=str(state),
                        gpus=(0,), env={"SLURM_JOB_CPUS_PER_NODE": "2"})
    spool.write_json(jdir / spool.REQUEST, req.to_json())
    sup = subprocess.Popen([sys.executable, "-c", SUP], stdout=subprocess.PIPE, text=True)
    assert sup.stdout is not None
    child = int(sup.stdout.readline())
    spool.write_json(jdir / spool.STATUS, {
        "job_id": 5, "supervisor_pid": sup.pid, "supervisor_ticks": start_ticks(sup.pid),
        "job_pid": child, "start_time": time.time(), "isolation": {"kind": "none"}})
    server, _t, port = serve("127.0.0.1:0", AgentCollector("gpunode", state))
    best: dict[str, float] = {}
    text = ""
    try:
        end = time.time() + 20
        while time.time() < end:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
            for fam in text_string_to_metric_families(text):
                for s in fam.samples:
                    if s.name.startswith(("corral_gpu", "corral_job")):
                        key = s.name + str(sorted(s.labels.items()))
                        best[key] = max(best.get(key, float("-inf")), s.value)
            time.sleep(0.5)
    finally:
        server.shutdown()
        for pid in (child, sup.pid):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        sup.wait()
    (out / "agent-gpu-metrics.txt").write_text(text)
    for k in sorted(best):
        print(f"INFO: max {k} = {best[k]}")

    def check(ok: bool, what: str) -> None:
        nonlocal failures
        print(("PASS: " if ok else "FAIL: ") + what, flush=True)
        failures += 0 if ok else 1

    gpu_util = [v for k, v in best.items() if k.startswith("corral_gpu_utilization_ratio")]
    check(bool(gpu_util) and max(gpu_util) > 0.5, f"GPU utilization seen through NVML: "
          f"{gpu_util}")
    total = [v for k, v in best.items() if k.startswith("corral_gpu_memory_total_bytes")]
    check(bool(total) and total[0] > 100e9, f"GPU memory total: {total}")
    job_util = [v for k, v in best.items() if k.startswith("corral_job_gpu_utilization_ratio")]
    check(bool(job_util) and max(job_util) > 0.5, f"per-job GPU utilization: {job_util}")
    job_cpu = [v for k, v in best.items() if k.startswith("corral_job_cpus_allocated")]
    check(job_cpu == [2.0], f"per-job allocated CPUs: {job_cpu}")
    mem = [v for k, v in best.items() if k.startswith("corral_job_gpu_memory_used_bytes")]
    print(f"INFO: per-job GPU memory (NVML per-process accounting; may be 0 in sandboxes "
          f"that hide process ids from the driver): {mem}")
    print(f"RESULT: {'FAIL' if failures else 'PASS'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
