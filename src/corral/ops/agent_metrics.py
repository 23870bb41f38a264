"""Prometheus metrics of a node agent: the node, its GPUs and each job running on it.

``AgentCollector(node, state_dir)`` reads, at scrape time, the agent's job spool
(``<state_dir>/jobs/<id>/request.json`` and ``status.json``, written by the runner and the
job supervisors) and ``/proc``; GPUs through NVML (``pynvml``) where a driver is present.
``serve(listen, collector)`` starts the HTTP endpoint (``/metrics``) in a daemon thread.

Per-job labels (``job_id``, ``user``) are used here on purpose: a node runs few jobs at a
time, and a series ends with its job, so the number of live series per agent stays
small. The controller's metrics never carry job labels.

Per-job usage of a running job:

- CPU seconds: the job cgroup's counter (``cpuacct.usage`` / ``cpu.stat``) when the job
  has one, else the CPU time of the supervisor's descendants (user + system, plus what
  their reaped children used, plus the children the supervisor reaped itself);
- resident memory: the sum of the RSS of the job's processes;
- GPU: the utilization of each GPU allocated to it (allocations are whole GPUs) and the
  GPU memory its processes hold (NVML's per-process accounting).

Node metrics: ``corral_node_cpu_seconds_total{mode}`` (rate it for utilization),
``corral_node_cpus``, ``corral_node_load1``, ``corral_node_memory_{total,available}_bytes``,
and per GPU ``corral_gpu_utilization_ratio``, ``corral_gpu_memory_{used,total}_bytes``,
``corral_gpu_power_watts``, ``corral_gpu_temperature_celsius``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger("corral.agent.metrics")
_MB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class GpuSample:
    index: int
    type: str
    utilization: float  # 0..1
    mem_used_bytes: int
    mem_total_bytes: int
    power_watts: float | None
    temperature_c: float | None
    process_mem: dict[int, int]  # pid -> GPU memory bytes


class NvmlSampler:
    """Reads GPU utilization through NVML; silently empty where NVML is not available.

    ``nvml`` may be any object with the pynvml functions used (tests pass a fake)."""

    def __init__(self, nvml: Any | None = None) -> None:
        self._nvml = nvml
        self._ready: bool | None = None
        self._lock = threading.Lock()

    def _init(self) -> bool:
        if self._ready is not None:
            return self._ready
        if self._nvml is None:
            try:
                import pynvml
            except ImportError:
                self._ready = False
                return False
            self._nvml = pynvml
        try:
            self._nvml.nvmlInit()
            self._ready = True
        except Exception:  # no driver, no library: no GPUs here
            self._ready = False
        return self._ready

    def sample(self) -> list[GpuSample]:
        with self._lock:
            if not self._init():
                return []
            nv: Any = self._nvml
            out: list[GpuSample] = []
            try:
                count = int(nv.nvmlDeviceGetCount())
            except Exception as exc:
                log.debug("NVML device count failed: %s", exc)
                return []
            for i in range(count):
                try:
                    out.append(self._one(nv, i))
                except Exception as exc:  # one device failing must not hide the others
                    log.debug("NVML sample of GPU %d failed: %s", i, exc)
            return out

    @staticmethod
    def _one(nv: Any, i: int) -> GpuSample:
        from corral.agent.gpu import gpu_type_slug

        h = nv.nvmlDeviceGetHandleByIndex(i)
        name = nv.nvmlDeviceGetName(h)
        name = name.decode() if isinstance(name, bytes) else str(name)
        util = nv.nvmlDeviceGetUtilizationRates(h)
        mem = nv.nvmlDeviceGetMemoryInfo(h)
        power: float | None
        try:
            power = float(nv.nvmlDeviceGetPowerUsage(h)) / 1000.0  # mW
        except Exception:
            power = None
        temp: float | None
        try:
            temp = float(nv.nvmlDeviceGetTemperature(h, 0))  # NVML_TEMPERATURE_GPU
        except Exception:
            temp = None
        procs: dict[int, int] = {}
        try:
            for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
                used = getattr(p, "usedGpuMemory", None)
                procs[int(p.pid)] = int(used) if isinstance(used, int) else 0
        except Exception:
            pass
        return GpuSample(i, gpu_type_slug(name), float(util.gpu) / 100.0, int(mem.used),
                         int(mem.total), power, temp, procs)


@dataclass(frozen=True, slots=True)
class JobSample:
    job_id: int
    user: str
    cpus: int
    mem_limit_bytes: int
    gpus: tuple[int, ...]
    start_time: float | None
    cpu_seconds: float
    rss_bytes: int
    pids: frozenset[int]
    batch_pid: int = 0  # the batch script's process (0: none here, or not known)


def _proc_cpu_seconds(pids: Iterable[int]) -> float:
    import psutil

    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except (psutil.Error, OSError):
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def _reaped_by(pid: int) -> float:
    """CPU time of the children ``pid`` already reaped (cutime + cstime)."""
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
    except (psutil.Error, OSError):
        return 0.0
    return float(t.children_user + t.children_system)


def cpus_per_node(text: str) -> list[int]:
    """Slurm's ``SLURM_JOB_CPUS_PER_NODE`` (``16``, ``2(x3),1``) -> one count per node."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        count, _, rep = part.partition("(x")
        out.extend([int(count)] * (int(rep.rstrip(")")) if rep else 1))
    return out


def alloc_cpus(req: dict[str, Any]) -> int:
    """CPUs allocated to the job on this node: from the job's environment (the allocation,
    even when the agent could not pin, e.g. a configured node larger than the machine),
    else the pinned CPUs."""
    env = req.get("env") or {}
    try:
        counts = cpus_per_node(str(env.get("SLURM_JOB_CPUS_PER_NODE", "")))
        idx = int(req.get("node_index") or 0)
        if 0 <= idx < len(counts):
            return counts[idx]
    except ValueError:
        pass
    return len(req.get("cpus") or ()) or len(req.get("cores") or ())


def sample_job(jdir: Path) -> JobSample | None:
    """Usage of the running job in spool directory ``jdir``; None when it is not running."""
    from corral.agent import spool
    from corral.agent.proctree import descendants, is_alive, rss_bytes

    if (jdir / spool.EXIT).exists():
        return None
    req = spool.read_json(jdir / spool.REQUEST)
    st = spool.read_json(jdir / spool.STATUS)
    if req is None or st is None:
        return None
    sup = int(st.get("supervisor_pid") or 0)
    if not sup or not is_alive(sup, st.get("supervisor_ticks")):
        return None
    pids = descendants(sup)
    cpu_s: float | None = None
    iso = st.get("isolation") or {}
    cg = iso.get("cgroup") if isinstance(iso, dict) else None
    if isinstance(cg, dict):
        try:
            from corral.agent.cgroups import JobCgroup

            cpu_s = JobCgroup.from_describe(cg).usage().cpu_s
        except Exception:
            cpu_s = None
    if cpu_s is None:
        cpu_s = _proc_cpu_seconds(pids) + _reaped_by(sup)
    cpus = alloc_cpus(req)
    return JobSample(
        job_id=int(req["job_id"]), user=str(req.get("user", "")), cpus=cpus,
        mem_limit_bytes=int(req.get("mem_mb") or 0) * _MB,
        gpus=tuple(int(g) for g in req.get("gpus") or ()),
        start_time=float(st["start_time"]) if st.get("start_time") else None,
        cpu_seconds=float(cpu_s), rss_bytes=rss_bytes(pids), pids=frozenset(pids),
        batch_pid=int(st.get("job_pid") or 0))


class AgentCollector(Collector):
    def __init__(self, node: str, state_dir: Path | str, *, alloc_cpus: int | None = None,
                 nvml: NvmlSampler | None = None) -> None:
        self.node = node
        self.state_dir = Path(state_dir)
        self.nvml = nvml if nvml is not None else NvmlSampler()
        self.alloc_cpus = alloc_cpus

    def jobs(self) -> list[JobSample]:
        from corral.agent import spool

        base = spool.jobs_dir(self.state_dir)
        out: list[JobSample] = []
        try:
            entries = sorted(base.iterdir())
        except OSError:
            return out
        for jdir in entries:
            if not jdir.name.isdigit():
                continue
            try:
                s = sample_job(jdir)
            except Exception as exc:  # a job ending mid-read: skip it this time
                log.debug("sampling %s failed: %s", jdir, exc)
                continue
            if s is not None:
                out.append(s)
        return out

    def collect(self) -> Iterator[Metric]:
        yield from self._node()
        jobs = self.jobs()
        gpus = self.nvml.sample()
        yield from self._gpus(gpus)
        yield from self._jobs(jobs, gpus)

    def _node(self) -> Iterator[Metric]:
        import psutil

        n = self.node
        cpu = CounterMetricFamily("corral_node_cpu_seconds", "CPU time of the node by mode "
                                  "(all CPUs together)", labels=["node", "mode"])
        times = psutil.cpu_times()
        for mode in ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"):
            v = getattr(times, mode, None)
            if v is not None:
                cpu.add_metric([n, mode], float(v))
        yield cpu
        g = GaugeMetricFamily("corral_node_cpus", "Logical CPUs of the node", labels=["node"])
        g.add_metric([n], float(psutil.cpu_count() or 0))
        yield g
        load = GaugeMetricFamily("corral_node_load1", "1-minute load average", labels=["node"])
        try:
            load.add_metric([n], os.getloadavg()[0])
        except OSError:  # no /proc/loadavg (some sandboxes): the family stays empty
            pass
        yield load
        vm = psutil.virtual_memory()
        tot = GaugeMetricFamily("corral_node_memory_total_bytes", "Memory of the node",
                                labels=["node"])
        tot.add_metric([n], float(vm.total))
        yield tot
        av = GaugeMetricFamily("corral_node_memory_available_bytes",
                               "Memory available for new processes", labels=["node"])
        av.add_metric([n], float(vm.available))
        yield av

    def _gpus(self, gpus: list[GpuSample]) -> Iterator[Metric]:
        n = self.node
        labels = ["node", "gpu", "type"]
        util = GaugeMetricFamily("corral_gpu_utilization_ratio",
                                 "GPU busy fraction over the last sample period (NVML)",
                                 labels=labels)
        used = GaugeMetricFamily("corral_gpu_memory_used_bytes", "GPU memory in use",
                                 labels=labels)
        total = GaugeMetricFamily("corral_gpu_memory_total_bytes", "GPU memory", labels=labels)
        power = GaugeMetricFamily("corral_gpu_power_watts", "GPU power draw", labels=labels)
        temp = GaugeMetricFamily("corral_gpu_temperature_celsius", "GPU temperature",
                                 labels=labels)
        for s in gpus:
            lv = [n, str(s.index), s.type]
            util.add_metric(lv, s.utilization)
            used.add_metric(lv, float(s.mem_used_bytes))
            total.add_metric(lv, float(s.mem_total_bytes))
            if s.power_watts is not None:
                power.add_metric(lv, s.power_watts)
            if s.temperature_c is not None:
                temp.add_metric(lv, s.temperature_c)
        yield from (util, used, total, power, temp)

    def _jobs(self, jobs: list[JobSample], gpus: list[GpuSample]) -> Iterator[Metric]:
        n = self.node
        labels = ["node", "job_id", "user"]
        running = GaugeMetricFamily("corral_agent_jobs_running", "Jobs running on the node",
                                    labels=["node"])
        running.add_metric([n], float(len(jobs)))
        yield running
        cpu = CounterMetricFamily("corral_job_cpu_seconds", "CPU time used by a running job",
                                  labels=labels)
        rss = GaugeMetricFamily("corral_job_memory_rss_bytes",
                                "Resident memory of a running job's processes", labels=labels)
        cpus = GaugeMetricFamily("corral_job_cpus_allocated", "CPUs allocated to a job here",
                                 labels=labels)
        limit = GaugeMetricFamily("corral_job_memory_limit_bytes",
                                  "Memory limit of a job here (0: none)", labels=labels)
        ngpu = GaugeMetricFamily("corral_job_gpus_allocated", "GPUs allocated to a job here",
                                 labels=labels)
        start = GaugeMetricFamily("corral_job_start_time_seconds",
                                  "When a running job started (epoch seconds)", labels=labels)
        gutil = GaugeMetricFamily("corral_job_gpu_utilization_ratio",
                                  "Utilization of a GPU allocated to a job",
                                  labels=labels + ["gpu"])
        gmem = GaugeMetricFamily("corral_job_gpu_memory_used_bytes",
                                 "GPU memory held by a job's processes", labels=labels)
        by_index = {g.index: g for g in gpus}
        for j in jobs:
            lv = [n, str(j.job_id), j.user]
            cpu.add_metric(lv, j.cpu_seconds)
            rss.add_metric(lv, float(j.rss_bytes))
            cpus.add_metric(lv, float(j.cpus))
            limit.add_metric(lv, float(j.mem_limit_bytes))
            ngpu.add_metric(lv, float(len(j.gpus)))
            if j.start_time is not None:
                start.add_metric(lv, j.start_time)
            held = 0
            for idx in j.gpus:
                g = by_index.get(idx)
                if g is not None:
                    gutil.add_metric(lv + [str(idx)], g.utilization)
            for g in gpus:
                held += sum(v for pid, v in g.process_mem.items() if pid in j.pids)
            if j.gpus or held:
                gmem.add_metric(lv, float(held))
        yield from (cpu, rss, cpus, limit, ngpu, start, gutil, gmem)

    def describe(self) -> Iterable[Metric]:
        return []


def parse_listen(listen: str) -> tuple[str, int]:
    """``host:port`` (``:port`` or ``port`` alone: all interfaces) -> (host, port)."""
    host, sep, port = listen.rpartition(":")
    if not sep:
        host, port = "", listen
    host = host.strip("[]") or "0.0.0.0"
    if not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"expected host:port for the metrics listener, got {listen!r}")
    return host, int(port)


def serve(listen: str, collector: Collector) -> tuple[Any, threading.Thread, int]:
    """Serve ``collector`` on ``http://listen/metrics`` in a daemon thread.

    Returns (server, thread, bound port); ``server.shutdown()`` stops it."""
    from prometheus_client import start_http_server

    host, port = parse_listen(listen)
    registry = CollectorRegistry()
    registry.register(collector)
    server, thread = start_http_server(port, addr=host, registry=registry)
    return server, thread, int(server.server_address[1])


def start_agent_metrics(listen: str, node: str, state_dir: Path | str) -> int:
    """What the agent daemon calls: serve this node's metrics; returns the bound port."""
    _server, _thread, port = serve(listen, AgentCollector(node, state_dir))
    log.info("agent metrics on http://%s:%d/metrics", parse_listen(listen)[0], port)
    return port




def main(argv: list[str] | None = None) -> None:
    """``python -m corral.ops.agent_metrics --state-dir DIR --listen HOST:PORT``: the agent's
    metrics as a stand-alone exporter next to an agent (reads the same spool directory)."""
    import argparse
    import signal
    import socket

    ap = argparse.ArgumentParser(prog="python -m corral.ops.agent_metrics",
                                 description=main.__doc__)
    ap.add_argument("--state-dir", required=True, help="the agent's state directory")
    ap.add_argument("--listen", default=":9101", help="host:port to serve /metrics on")
    ap.add_argument("--node", default=socket.gethostname().split(".")[0], help="node name")
    args = ap.parse_args(argv)
    try:
        server, _thread, port = serve(args.listen, AgentCollector(args.node, args.state_dir))
    except (ValueError, OSError) as exc:
        raise SystemExit(f"corral agent metrics: {exc}") from None
    print(f"serving node {args.node} metrics on :{port}/metrics", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    server.shutdown()


if __name__ == "__main__":
    main()
