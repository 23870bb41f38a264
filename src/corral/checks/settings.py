"""``[checks]`` of corral.toml: limits and programs of ``corral check cluster``.

Defined here, beside the checks, so that the checks can read a ``[checks]`` table from a
file of their own (``corral check cluster --config FILE``, ``checks.conffile``) as well as
from the running controller's configuration; keys and defaults are documented in
docs/checks.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ChecksConfig:
    """``[checks]``: limits and programs of ``corral check cluster`` (docs/checks.md)."""

    min_relative: float = 0.7  # a node under this fraction of the median is an outlier
    max_latency_ratio: float = 2.0  # latency over this multiple of the median: outlier
    min_bandwidth_mb_s: float | None = None  # ping-pong, 1 MiB messages
    max_latency_us: float | None = None  # ping-pong, 8-byte messages
    min_hpl_efficiency: float | None = None  # 0..1 of the theoretical peak
    min_stream_gb_s: float | None = None
    min_seq_mb_s: float | None = None  # fio sequential write
    min_rand_iops: float | None = None  # fio 4 KiB random read
    work_dir: str | None = None  # shared by every node; None: <state dir>/checks/runs
    scratch_dir: str = "/tmp"  # each node's local scratch for fio
    mpicc: str = "mpicc.mpich"
    mpi_launch: str = "srun --mpi=pmi2"  # how a 2-node step starts the ping-pong
    hpcc_launch: str = "mpirun.openmpi --bind-to none --oversubscribe"  # hpcc is Open MPI
    hpl_ranks: int | None = None  # MPI ranks of hpcc per node; None: the node's CPUs
    hpl_n: int | None = None  # HPL problem size; None: 1000 with --quick, else 4000
    max_pairs: int = 64  # more node pairs than this: a sample covering every node
    partition: str | None = None
    timeout_s: int = 1800
    min_scaling: float = 0.5  # all nodes' HPL under this fraction of n x the median node
    all_nodes: bool = True  # the all-nodes job (HPL together, fio from all at once)
    interval_s: int = 0  # periodic --quick runs by the controller; 0: off
    drain_outliers: bool = False  # the periodic runs drain the nodes they name
    nice: int = 10000  # nice of the periodic runs' jobs (lowest priority; never preempts)
    keep_runs: int = 50  # periodic runs kept (reports and run directories)
