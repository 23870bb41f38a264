"""Run the checks as ordinary Corral jobs and collect what they measured.

Plan of one run (``run_checks``):

1. **network**: one job on all the nodes checked (``--exclusive``, one task a node) whose
   script starts one 2-node step per pair (``srun -N2 -n2 -w a,b --mpi=pmi2 pingpong``,
   ``[checks] mpi_launch``), one pair after the other so that pairs do not share a NIC;
   pairs from ``verdict.pairs_to_measure`` (all of them up to ``max_pairs``).
2. **node** (compute and storage): one exclusive job per node, all at once: a CPU probe,
   ``hpcc`` (HPL, DGEMM, STREAM; ``hpl_ranks`` MPI ranks, problem size ``hpl_n``), then
   ``fio`` sequential write and 4 KiB random read in the node's ``scratch_dir`` and in the
   run directory (shared by the nodes); with ``gpu`` checks, ``nvidia-smi`` (count, type,
   memory) where it is installed.
3. **all nodes** (with two nodes or more, after the node jobs: ``--dependency=afterany``):
   one exclusive job on every node: ``hpcc`` with ``hpl_ranks`` ranks on each node
   together (problem size ``hpl_n`` x sqrt(nodes), so memory per node stays the same;
   not with ``--quick``: with more than one rank hpcc also runs its latency/bandwidth
   section, up to 40 s by itself),
   then ``fio`` sequential write on the shared run directory from every node at once
   (each waits until all are ready, then writes what its solo run wrote).

Every file a job writes lies in the run directory (``[checks] work_dir`` or
``<state dir>/checks/runs/<run id>``), which must be visible on every node under the same
path. The jobs are scheduled, accounted and listed like any other (names ``check-*``).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corral.checks.parse import (
    parse_fio,
    parse_gpus,
    parse_hpcc,
    parse_pingpong,
    parse_probe,
    peak_gflops,
)
from corral.checks.verdict import ALL, AllNodesResult, LinkResult, NodeResult

FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
CHECKS = ("network", "compute", "storage", "gpu")

HPCC_INPUT = """HPLinpack benchmark input file
Corral cluster check
HPL.out      output file name (if any)
8            device out (6=stdout,7=stderr,file)
1            # of problems sizes (N)
{n}          Ns
1            # of NBs
{nb}         NBs
0            PMAP process mapping (0=Row-,1=Column-major)
1            # of process grids (P x Q)
{p}          Ps
{q}          Qs
16.0         threshold
1            # of panel fact
2            PFACTs (0=left, 1=Crout, 2=Right)
1            # of recursive stopping criterium
4            NBMINs (>= 1)
1            # of panels in recursion
2            NDIVs
1            # of recursive panel fact.
1            RFACTs (0=left, 1=Crout, 2=Right)
1            # of broadcast
1            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)
1            # of lookahead depth
1            DEPTHs (>=0)
2            SWAP (0=bin-exch,1=long,2=mix)
64           swapping threshold
0            L1 in (0=transposed,1=no-transposed) form
0            U  in (0=transposed,1=no-transposed) form
1            Equilibration (0=no,1=yes)
8            memory alignment in double (> 0)
##### This line (no. 32) is ignored (it serves as a separator). ######
0                               Number of additional problem sizes for PTRANS
1200 10000 30000                values of N
0                               number of additional blocking sizes for PTRANS
40 9 8 13 13 20 16 32 64        values of NB
"""


def grid(ranks: int) -> tuple[int, int]:
    """The most square P x Q = ranks with P <= Q (HPL's advice)."""
    p = int(ranks ** 0.5)
    while p > 1 and ranks % p:
        p -= 1
    return max(p, 1), ranks // max(p, 1)


@dataclass(frozen=True)
class RunPlan:
    run_id: str
    run_dir: Path
    nodes: tuple[str, ...]
    pairs: tuple[tuple[str, str], ...]
    checks: tuple[str, ...]
    quick: bool
    settings: Mapping[str, Any] = field(default_factory=dict)  # [checks] as JSON

    def s(self, key: str, default: Any = None) -> Any:
        v = self.settings.get(key)
        return default if v is None else v


def pair_file(plan: RunPlan, a: str, b: str) -> Path:
    return plan.run_dir / f"pingpong-{a}~{b}.txt"


def node_dir(plan: RunPlan, node: str) -> Path:
    return plan.run_dir / f"node-{node}"


def network_script(plan: RunPlan, exe: Path) -> str:
    budget, size = (0.2, 1 << 20) if plan.quick else (1.0, 4 << 20)
    pair_s = 60 if plan.quick else 300  # a pair that takes longer is cut off, not waited on
    launch = str(plan.s("mpi_launch", "srun --mpi=pmi2"))
    lines = ["#!/bin/sh", "# corral check: MPI ping-pong, one node pair at a time",
             "# never shared memory between the two ranks, even where two nodes share a",
             "# kernel (containers, namespaces): MPICH's and UCX's own switches",
             "export MPIR_CVAR_NOLOCAL=1 MPIR_CVAR_CH3_NOLOCAL=1 UCX_TLS=\"${UCX_TLS:-^sm}\""]
    for a, b in plan.pairs:
        out = shlex.quote(str(pair_file(plan, a, b)))
        lines.append(f"timeout {pair_s} {launch} -N2 -n2 -w {a},{b} {shlex.quote(str(exe))} "
                     f"{budget} {size} > {out} 2>&1 || echo \"exit status $?\" >> {out}")
    return "\n".join(lines) + "\n"


def node_script(plan: RunPlan, node: str, ranks: int) -> str:
    d = node_dir(plan, node)
    n = int(plan.s("hpl_n", 1000 if plan.quick else 4000))
    p, q = grid(ranks)
    size_mb, runtime_s = (16, 1) if plan.quick else (256, 5)
    q_d = shlex.quote(str(d))
    lines = ["#!/bin/sh", f"# corral check: compute and storage on {node}",
             f"mkdir -p {q_d} && cd {q_d} || exit 1",
             "{ echo cpus=$(nproc); echo max_khz=$(cat /sys/devices/system/cpu/cpu0/cpufreq/"
             "cpuinfo_max_freq 2>/dev/null); grep -m1 '^model name' /proc/cpuinfo; "
             "grep -m1 '^cpu MHz' /proc/cpuinfo; grep -m1 '^flags' /proc/cpuinfo; "
             f"echo ranks={ranks}; }} > probe.txt"]
    if "gpu" in plan.checks:
        lines += [GPU_PROBE]
    if "compute" in plan.checks:
        lines += hpcc_lines(plan, n, ranks, p, q)
    if "storage" in plan.checks:
        scratch = Path(str(plan.s("scratch_dir", "/tmp"))) / f"corral-check-{plan.run_id}-{node}"
        for where, target in (("local", scratch), ("shared", d / "fio")):
            t = shlex.quote(str(target))
            lines += [f"mkdir -p {t}",
                      f"fio --output-format=json --output=fio-{where}.json --directory={t} "
                      f"--ioengine=psync --size={size_mb}M --name=seq --rw=write --bs=1M "
                      f"--end_fsync=1 --name=rand --stonewall --rw=randread --bs=4k "
                      f"--time_based --runtime={runtime_s} > fio-{where}.log 2>&1 "
                      f"|| echo \"fio exit status $?\" >> fio-{where}.log",
                      f"rm -rf {t}"]
    return "\n".join(lines) + "\n"


GPU_PROBE = ("if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi --query-gpu=index,"
             "name,memory.total,clocks.max.sm,pcie.link.width.current,pcie.link.width.max "
             "--format=csv,noheader,nounits > gpus.txt "
             "2> gpus.log || echo \"nvidia-smi exit status $?\" >> gpus.log; "
             "else echo 'no nvidia-smi' > gpus.log; fi")


def hpcc_lines(plan: RunPlan, n: int, ranks: int, p: int, q: int) -> list[str]:
    inp = HPCC_INPUT.format(n=n, nb=80 if n >= 800 else 40, p=p, q=q)
    launch = "" if ranks == 1 else \
        f"{plan.s('hpcc_launch', 'mpirun.openmpi --bind-to none --oversubscribe')} " \
        f"-np {ranks} "
    return ["cat > hpccinf.txt <<'CORRAL_EOF'", inp.rstrip("\n"), "CORRAL_EOF",
            "export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
            "rm -f hpccoutf.txt",
            f"{launch}hpcc > hpcc.log 2>&1 || echo \"hpcc exit status $?\" >> hpcc.log"]


def all_dir(plan: RunPlan) -> Path:
    return plan.run_dir / "all-nodes"


def all_nodes_script(plan: RunPlan, ranks_per_node: int) -> str:
    """HPL on every node together, then fio on the shared directory from all at once."""
    d = all_dir(plan)
    k = len(plan.nodes)
    q_d = shlex.quote(str(d))
    lines = ["#!/bin/sh", f"# corral check: all {k} nodes together",
             f"mkdir -p {q_d} && cd {q_d} || exit 1"]
    if all_hpl(plan):
        n = int(int(plan.s("hpl_n", 4000)) * k ** 0.5)
        p, q = grid(k * ranks_per_node)
        lines += hpcc_lines(plan, n, k * ranks_per_node, p, q)
    if "storage" in plan.checks:
        size_mb = 16 if plan.quick else 256  # the solo run's size: the figures compare
        # every node's task: ready, wait for the others (bounded), then the solo run's write
        task = (f"cd {q_d} && touch ready-$SLURMD_NODENAME && i=0; "
                f"while [ $(ls ready-* | wc -l) -lt {k} ] && [ $i -lt 600 ]; do "
                "sleep 0.05; i=$((i+1)); done; "
                "mkdir -p fio-$SLURMD_NODENAME && "
                "fio --output-format=json --output=fio-$SLURMD_NODENAME.json "
                "--directory=fio-$SLURMD_NODENAME --ioengine=psync "
                f"--size={size_mb}M --name=seq --rw=write --bs=1M --end_fsync=1 "
                "> fio-$SLURMD_NODENAME.log 2>&1 "
                "|| echo \"fio exit status $?\" >> fio-$SLURMD_NODENAME.log; "
                "rm -rf fio-$SLURMD_NODENAME")
        lines += ["rm -f ready-*",
                  f"srun -N{k} --ntasks-per-node=1 sh -c {shlex.quote(task)}"]
    return "\n".join(lines) + "\n"


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def collect_link(plan: RunPlan, a: str, b: str) -> LinkResult:
    text = _read(pair_file(plan, a, b))
    if text is None:
        return LinkResult(a, b, error="no output (the network job did not reach this pair)")
    try:
        pp = parse_pingpong(text)
    except ValueError as exc:
        return LinkResult(a, b, error=f"{exc}: {text.strip()[-300:]}")
    return LinkResult(a, b, pp["latency_us"], pp["bandwidth_mb_s"])


def collect_node(plan: RunPlan, node: str, job_state: str | None) -> NodeResult:
    d = node_dir(plan, node)
    errors: list[str] = []
    if job_state not in (None, "COMPLETED"):
        errors.append(f"check job ended {job_state}")
    hpl = stream = peak = None
    probe_text = _read(d / "probe.txt")
    if "compute" in plan.checks:
        text = _read(d / "hpccoutf.txt")
        try:
            if text is None:
                raise ValueError("no hpccoutf.txt: " + (_read(d / "hpcc.log") or "")[-300:])
            summary = parse_hpcc(text)
            hpl = summary["HPL_Tflops"] * 1000
            stream = summary.get("StarSTREAM_Triad")
            if probe_text:
                probe = parse_probe(probe_text)
                ranks = int(summary.get("CommWorldProcs", 1))
                peak = peak_gflops(ranks, probe.mhz, probe.flags)
        except ValueError as exc:
            errors.append(f"compute check: {exc}")
    storage: dict[str, float] = {}
    if "storage" in plan.checks:
        for where in ("local", "shared"):
            text = _read(d / f"fio-{where}.json")
            try:
                if text is None:
                    raise ValueError("no output: " + (_read(d / f"fio-{where}.log") or "")[-300:])
                res = parse_fio(text)
                storage[f"{where}_seq_mb_s"] = res["seq"]["bw_mb_s"]
                storage[f"{where}_rand_iops"] = res["rand"]["iops"]
            except (ValueError, KeyError) as exc:
                errors.append(f"storage check ({where}): {exc}")
    gpus: tuple[str, ...] | None = None
    pcie: tuple[tuple[float | None, float | None], ...] = ()
    if "gpu" in plan.checks:
        text = _read(d / "gpus.txt")
        log = _read(d / "gpus.log") or ""
        if "exit status" in log:
            errors.append("gpu check: " + log[-300:].strip())
        elif text is not None:
            try:
                probed = parse_gpus(text)
                gpus = tuple(g.name for g in probed)
                pcie = tuple((g.pcie_width, g.pcie_width_max) for g in probed)
            except ValueError as exc:
                errors.append(f"gpu check: {exc}")
        else:
            gpus = ()  # no nvidia-smi: no GPUs seen
    return NodeResult(node, hpl, stream, peak, storage, tuple(errors), gpus, pcie)


def collect_all(plan: RunPlan, job_state: str | None,
                nodes: Sequence[NodeResult]) -> AllNodesResult:
    """What the all-nodes job measured; the peak is the sum of the nodes' peaks (None when
    one is unknown)."""
    d = all_dir(plan)
    errors: list[str] = []
    if job_state not in (None, "COMPLETED"):
        errors.append(f"all-nodes job ended {job_state}")
    hpl = peak = None
    ranks = 0
    if all_hpl(plan):
        text = _read(d / "hpccoutf.txt")
        try:
            if text is None:
                raise ValueError("no hpccoutf.txt: " + (_read(d / "hpcc.log") or "")[-300:])
            summary = parse_hpcc(text)
            hpl = summary["HPL_Tflops"] * 1000
            ranks = int(summary.get("CommWorldProcs", 0))
            peaks = [n.peak_gflops for n in nodes]
            peak = sum(x for x in peaks if x) if peaks and all(peaks) else None
        except ValueError as exc:
            errors.append(f"compute check (all nodes): {exc}")
    many: dict[str, float] = {}
    if "storage" in plan.checks:
        for node in plan.nodes:
            text = _read(d / f"fio-{node}.json")
            try:
                if text is None:
                    raise ValueError("no output: " + (_read(d / f"fio-{node}.log") or "")[-300:])
                many[node] = parse_fio(text)["seq"]["bw_mb_s"]
            except (ValueError, KeyError) as exc:
                errors.append(f"storage check (all nodes at once, {node}): {exc}")
    return AllNodesResult(len(plan.nodes), ranks, hpl, peak, many, tuple(errors))


Submit = Callable[[Sequence[str], str], int]  # (sbatch argv, script text) -> job id


def run_checks(plan: RunPlan, submit: Submit, job_state: Callable[[int], str],
               node_cpus: Mapping[str, int], exe: Path | None,
               timeout_s: float, cancel: Callable[[int], None],
               poll_s: float = 0.2) -> tuple[list[NodeResult], list[LinkResult],
                                             AllNodesResult | None, list[int]]:
    """Submit the plan's jobs, wait for them (cancel what is left at ``timeout_s``) and
    collect the results. Returns (nodes, links, all nodes together, job ids)."""
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    part = plan.s("partition")
    common = ["--exclusive", "-o", str(plan.run_dir / "%x-%j.out")]
    if part:
        common += ["-p", str(part)]
    jobs: dict[int, str] = {}
    if "network" in plan.checks and plan.pairs and exe is not None:
        nodes = sorted({n for pr in plan.pairs for n in pr})
        jid = submit(["-J", "check-network", f"-N{len(nodes)}", "--ntasks-per-node=1",
                      "-w", ",".join(nodes), *common], network_script(plan, exe))
        jobs[jid] = "network"
    if node_jobs(plan):
        for node in plan.nodes:
            ranks = int(plan.s("hpl_ranks", node_cpus.get(node, 1) or 1))
            jid = submit(["-J", f"check-{node}", "-N1", "-w", node, *common],
                         node_script(plan, node, ranks))
            jobs[jid] = node
    if wants_all(plan):
        ranks = min(int(plan.s("hpl_ranks", node_cpus.get(n, 1) or 1)) for n in plan.nodes)
        after = [j for j, what in jobs.items() if what != "network"]
        dep = ["--dependency", "afterany:" + ":".join(map(str, after))] if after else []
        jid = submit(["-J", "check-all-nodes", f"-N{len(plan.nodes)}",
                      f"--ntasks-per-node={ranks}", "-w", ",".join(plan.nodes), *dep, *common],
                     all_nodes_script(plan, ranks))
        jobs[jid] = ALL
    states: dict[int, str] = {}
    end = time.monotonic() + timeout_s
    while len(states) < len(jobs):
        for jid in jobs:
            if jid not in states:
                st = job_state(jid)
                if st in FINISHED:
                    states[jid] = st
        if len(states) < len(jobs):
            if time.monotonic() > end:
                for jid in jobs:
                    if jid not in states:
                        cancel(jid)
                        states[jid] = "TIMEOUT"
                break
            time.sleep(poll_s)
    by_node = {what: states.get(jid) for jid, what in jobs.items()}
    links = [collect_link(plan, a, b) for a, b in plan.pairs] \
        if "network" in plan.checks and exe is not None else []
    nodes_out = [collect_node(plan, n, by_node.get(n)) for n in plan.nodes] \
        if node_jobs(plan) else []
    together = collect_all(plan, by_node.get(ALL), nodes_out) if wants_all(plan) else None
    return nodes_out, links, together, list(jobs)


def node_jobs(plan: RunPlan) -> bool:
    return bool({"compute", "storage", "gpu"} & set(plan.checks))


def wants_all(plan: RunPlan) -> bool:
    """The all-nodes job runs on two nodes or more when it has something to do (HPL or
    fio at once), unless ``[checks] all_nodes = false``."""
    return len(plan.nodes) >= 2 and bool(plan.s("all_nodes", True)) \
        and (all_hpl(plan) or "storage" in plan.checks)


def all_hpl(plan: RunPlan) -> bool:
    """HPL on all nodes together: compute checks, not ``--quick``."""
    return "compute" in plan.checks and not plan.quick
