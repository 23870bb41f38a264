#!/bin/bash
# Device check of the node agent on a GPU machine (cgroups v2 + NVML expected there):
#   1. discovery: CPU topology, memory, GPUs through NVML, cross-checked with nvidia-smi
#   2. cgroup layout: v2 with memory/cpuset/pids
#   3. real jobs through JobRunner in cgroup v2: memory limit -> OUT_OF_MEMORY (memory.peak,
#      memory.events oom_kill), cpuset pinning that the job cannot widen, pids.max, time limit
#      killing a whole tree (cgroup.kill), GPU binding variables, cleanup of the job cgroups.
# Prints PASS:/FAIL:/SKIP: lines and "RESULT: N passed, M failed"; exits non-zero on failure.
# Needs only python3 (>= 3.9) and the source tree; pynvml is taken from the venv, from
# PYNVML_DIR, or from .state/devcheck/ (drop nvidia-ml-py's pynvml.py there).
# Usage: scripts/device-check-agent.sh   (as root; creates /sys/fs/cgroup/corral-devcheck-<pid>)
set -u
cd "$(dirname "$0")/.."
PY=""
for cand in .venv/bin/python python3; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then
    PY=$(command -v "$cand"); break
  fi
done
[ -n "$PY" ] || { echo "FAIL: no python3 >= 3.9"; echo "RESULT: 0 passed, 1 failed"; exit 1; }
# the real interpreter, not a shim script
PY=$("$PY" -c 'import sys; print(sys.executable)')
export PYTHONPATH="$PWD/src:${PYNVML_DIR:-$PWD/.state/devcheck}${PYTHONPATH:+:$PYTHONPATH}"
echo "python: $PY ($("$PY" -V 2>&1)); kernel $(uname -r); uid $(id -u)"
command -v nvidia-smi >/dev/null && nvidia-smi -L
exec "$PY" - <<'PYEOF'
import json, os, shutil, subprocess, sys, tempfile, time

passed = failed = 0
def check(ok, what, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"PASS: {what}")
    else:
        failed += 1
        print(f"FAIL: {what}" + (f" -- {detail}" if detail else ""))
    sys.stdout.flush()

def skip(what):
    print(f"SKIP: {what}")

from corral.agent.cgroups import detect_layout
from corral.agent.discovery import discover_node
from corral.agent.launch import LaunchRequest
from corral.agent.runner import JobRunner

# ---- 1. discovery -------------------------------------------------------------------------
t0 = time.monotonic()
spec = discover_node()
print(f"discovery took {1000 * (time.monotonic() - t0):.0f} ms")
print(json.dumps({"sockets": spec.sockets, "cores_per_socket": spec.cores_per_socket,
                  "threads_per_core": spec.threads_per_core, "mem_mb": spec.mem_mb,
                  "numa": [(d.id, len(d.cores), d.mem_mb) for d in spec.numa],
                  "features": sorted(spec.features),
                  "gpus": [(g.index, g.type, g.mem_mb, g.numa, g.uuid) for g in spec.gpus]}))
check(spec.cpus == os.cpu_count(), f"discovered {spec.cpus} CPUs == os.cpu_count() {os.cpu_count()}")
try:
    import pynvml  # noqa: F401
    have_nvml = True
except ImportError:
    have_nvml = False
    skip("pynvml not importable: GPU discovery not checked (set PYNVML_DIR)")
smi = shutil.which("nvidia-smi")
if have_nvml and smi:
    rows = subprocess.run([smi, "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True).stdout.strip().splitlines()
    rows = [[c.strip() for c in r.split(",")] for r in rows if r.strip()]
    check(len(spec.gpus) == len(rows) and len(rows) > 0,
          f"NVML found {len(spec.gpus)} GPUs, nvidia-smi lists {len(rows)}")
    for g, r in zip(spec.gpus, rows):
        check(str(g.index) == r[0] and g.uuid == r[1] and g.mem_mb == int(r[3]),
              f"GPU {g.index}: uuid/memory match nvidia-smi ({g.type}, {g.mem_mb} MiB)", str(r))
        check(g.numa is not None, f"GPU {g.index}: NUMA domain known ({g.numa})")
    check("gpu" in spec.features, "feature 'gpu' present")

# ---- 2. cgroup layout ---------------------------------------------------------------------
layout = detect_layout()
print("cgroup layout:", layout.describe())
check(layout.mode == "v2", "cgroup v2 with the memory controller detected", layout.describe())
if os.geteuid() != 0:
    skip("not root: no job checks")
    print(f"RESULT: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)

# ---- 3. jobs in cgroups -------------------------------------------------------------------
root = f"corral-devcheck-{os.getpid()}"
work = tempfile.mkdtemp(prefix="corral-devcheck-")
runner = JobRunner(os.path.join(work, "state"), cgroup_root=root, node_name="dev", isolation="cgroup")
print("runner layout:", runner.layout.describe())
check(runner.layout.mode != "none", "job cgroup parent is writable", runner.layout.reason)

def req(jid, script, **kw):
    return LaunchRequest(job_id=jid, name=f"dc{jid}", user="root", uid=0, gid=0, workdir=work,
                         script=script, kill_grace_s=1, **kw)

def wait_all(n, timeout=60):
    got, end = {}, time.monotonic() + timeout
    while len(got) < n and time.monotonic() < end:
        runner.wait(0.2)
        for e in runner.poll():
            got[e.job_id] = e
    return got

def out(jid):
    try:
        with open(os.path.join(work, f"slurm-{jid}.out")) as f:
            return f.read()
    except OSError as exc:
        return f"<{exc}>"

hog = (f"#!{sys.executable}\nimport time\nchunks = []\nfor i in range(64):\n"
       "    chunks.append(b'\\x01' * (16 << 20))\n    print('mib', (i + 1) * 16, flush=True)\n"
       "    time.sleep(0.05)\nprint('NOT KILLED', flush=True)\n")
cpu = max(os.sched_getaffinity(0))
place = ("#!/bin/sh\ncat /proc/self/cgroup\ngrep Cpus_allowed_list /proc/self/status\n"
         "taskset -p -c 0-1023 $$ >/dev/null 2>&1\ngrep Cpus_allowed_list /proc/self/status\n"
         "echo CVD=$CUDA_VISIBLE_DEVICES ORDER=$CUDA_DEVICE_ORDER\n")
pids = (f"#!{sys.executable}\nimport subprocess\nps, errs = [], 0\nfor i in range(10):\n"
        "    try:\n        ps.append(subprocess.Popen(['sleep', '5']))\n"
        "    except OSError:\n        errs += 1\nfor p in ps:\n    p.kill(); p.wait()\n"
        "print('started=%d refused=%d' % (len(ps), errs))\n")
tree = "#!/bin/bash\nsleep 300 &\necho $! > tree.pid\nsleep 300\n"
t0 = time.monotonic()
runner.launch(req(1, hog, mem_mb=64))
runner.launch(req(2, place, cpus=(cpu,), mem_mb=128, gpus=(0,) if spec.gpus else ()))
runner.launch(req(3, pids, max_pids=5))
runner.launch(req(4, tree, time_limit_s=2))
exits = wait_all(4)
print(f"4 jobs ended in {time.monotonic() - t0:.1f} s")
for jid, e in sorted(exits.items()):
    print(json.dumps(e.to_json()))
check(len(exits) == 4, "all 4 jobs reported", str(sorted(exits)))
e1 = exits.get(1)
check(e1 is not None and e1.state == "OUT_OF_MEMORY", "memory.max 64 MB: hog ends OUT_OF_MEMORY",
      f"{e1} {out(1)[-200:]}")
check(e1 is not None and 40 <= e1.max_rss_mb <= 70, f"peak memory from memory.peak ({e1 and e1.max_rss_mb} MB)")
check("oom_kill event" in out(1), "Slurm's oom_kill message in the output file")
text2 = out(2)
check(f"0::/{root}/dev/job_2" in text2, "job placed in its v2 cgroup", text2)
allowed = [ln.split()[1] for ln in text2.splitlines() if ln.startswith("Cpus_allowed_list")]
check(allowed == [str(cpu), str(cpu)], f"cpuset pins to CPU {cpu} and cannot be widened", str(allowed))
if spec.gpus:
    check("CVD=0 ORDER=PCI_BUS_ID" in text2, "CUDA_VISIBLE_DEVICES=0 and CUDA_DEVICE_ORDER set", text2)
check("started=4 refused=6" in out(3), "pids.max=5 caps forks", out(3))
e4 = exits.get(4)
check(e4 is not None and e4.state == "TIMEOUT" and "DUE TO TIME LIMIT" in out(4),
      "time limit: TIMEOUT + Slurm message", f"{e4} {out(4)}")
try:
    gc_pid = int(open(os.path.join(work, "tree.pid")).read())
    gone = not os.path.exists(f"/proc/{gc_pid}") or open(f"/proc/{gc_pid}/stat").read().split(") ")[1][0] in "ZX"
except (OSError, ValueError):
    gone = False
check(gone, "the grandchild sleep was killed with the tree")
check(all(e.cpu_time_s > 0 for e in exits.values()), "cpu time from cpu.stat for every job")
left = [d for d in (os.path.join(layout.v2_root or "/nonexistent", root, "dev", f"job_{j}")
                    for j in range(1, 5)) if os.path.exists(d)]
check(not left, "job cgroups removed", str(left))
for j in range(1, 5):
    runner.ack(j)
runner.close()
for d in (os.path.join(root, "dev"), root):
    for base in [layout.v2_root] + list(layout.v1.values()) + [layout.tracking]:
        if base and os.path.isdir(os.path.join(base, d)):
            try:
                os.rmdir(os.path.join(base, d))
            except OSError as exc:
                print(f"note: could not remove {os.path.join(base, d)}: {exc}")
shutil.rmtree(work, ignore_errors=True)
print(f"RESULT: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PYEOF
