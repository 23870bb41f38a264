"""Golden replays: every decision of a few fixed replays, pinned by digest.

The digests were recorded with the code before the incremental fair share (issue 18) by
``bench/golden_replays.py`` (same digest: SHA-256 of the policy label and the per-job
start, end, state and CPU columns). A change that alters any decision of these replays
fails here; ``bench/golden_replays.py --set full`` runs the larger set.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from corral.sim.cluster import from_header
from corral.sim.compare import parse_policy
from corral.sim.engine import EngineOptions, simulate
from corral.sim.swf import read_swf
from corral.sim.workload import ExceedPolicy, build_workload, select

GOLDEN = [
    ('SDSC-SP2-1998-4.2-cln.swf.gz', '0:5000', 'fcfs+strict', {},
     '524d9456c8edb7855e29b8c0eac2167022ecf5c003a2bb4345038d53ba3770c5'),
    ('SDSC-SP2-1998-4.2-cln.swf.gz', '0:5000', 'fcfs+easy', {},
     'cd9a88ab4c9f49a43ac2267eedddebb156bbfc972603c444cdea58e230889184'),
    ('SDSC-SP2-1998-4.2-cln.swf.gz', '0:5000', 'sjf+easy', {},
     'ed169c6f389af87b80c9cd721d9b60b05211c8e6572dada6482326c6d49739fa'),
    ('SDSC-SP2-1998-4.2-cln.swf.gz', '0:5000', 'fcfs+conservative', {},
     '670bb60cb4242e32ab2d0a1c505c9649b88b53fc9fe783554083b7e023618b80'),
    ('SDSC-SP2-1998-4.2-cln.swf.gz', '0:5000', 'multifactor+easy', {},
     '6b914ca2fa27b4146330e3cbf34b3e9f7acb114e6274ebdf8fdae445a50cfd04'),
    ('SDSC-SP2-1998-4.2-cln.swf.gz', '0:5000', 'multifactor+easy+nofs', {},
     '845f261e728390a349b834469e18b443a4e3ab8afdc514ce11c4b8abcca8d889'),
    ('HPC2N-2002-2.2-cln.swf.gz', '120000:125000', 'fcfs+easy', {},
     '9f0348e412b0a383659b633cbf111888d1701f2707117bb76ad12d3bac2460c7'),
    ('HPC2N-2002-2.2-cln.swf.gz', '120000:125000', 'multifactor+easy', {},
     '19c55808d02cc9f6b9b61d0abb64bff6c29a9d9b6ba5b37a06f80f4fc675e2dc'),
    ('SDSC-SP2-1998-4.2-cln.swf.gz', '0:3000', 'sjf+easy', {'cycle': 'event'},
     '7325392cf59802f20d0fb00f5f8920961b8117343a5c81071d6d3dd8dfde9c67'),
]


@pytest.mark.parametrize(("trace", "jobs", "policy", "options", "digest"), GOLDEN,
                         ids=[f"{g[0][:8]}-{g[1]}-{g[2]}" for g in GOLDEN])
def test_decisions_are_unchanged(traces_dir: Path, trace: str, jobs: str, policy: str,
                                 options: dict[str, str], digest: str) -> None:
    wl = select(build_workload(read_swf(traces_dir / trace)), jobs)
    pol = parse_policy(policy)
    res = simulate(wl, from_header(wl.max_nodes, wl.max_procs),
                   EngineOptions(config=pol.config, label=pol.label,
                                 exceed=ExceedPolicy(options.get("exceed", "kill")),
                                 cycle_mode=options.get("cycle", "batch")))
    h = hashlib.sha256(policy.encode())
    for arr in (res.start_s, res.end_s, res.state.astype(np.int64), res.alloc_cpus):
        h.update(np.ascontiguousarray(arr).tobytes())
    assert h.hexdigest() == digest
