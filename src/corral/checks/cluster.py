"""One whole check run through a client: plan, jobs, verdicts, report, drains.

``run_cluster`` is what ``corral check cluster`` does and what the controller's periodic
check task (``corral.controller.check_task``) calls: it reads the nodes and ``[checks]``
from the controller, builds the ping-pong program, plans the pairs (switch-aware with
``[[switches]]``), submits the jobs as ordinary ``sbatch`` submissions through the client
(``nice`` lowers their priority), waits, judges (``corral.checks.verdict``), writes the
report under ``<checks dir>/reports/<run id>/`` and, with ``drain``, drains the nodes named.
Bad input and missing programs raise ``CheckError`` with the message to print; client
errors (``CorralError``) pass through.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

USABLE = {"IDLE", "MIXED", "ALLOCATED", "COMPLETING"}


class CheckError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _expand(expr: str) -> list[str]:
    from corral.core.parse.errors import ParseError
    from corral.core.parse.hostlist import expand

    try:
        return list(expand(expr))
    except ParseError as exc:
        raise CheckError(f"--nodes {expr!r}: {exc}") from None


def submitter(client: Any, run_dir: Path, prog: str,
              nice: int | None = None) -> Callable[[Sequence[str], str], int]:
    """``(sbatch argv, script) -> job id``: the script is kept as ``jobN.sh`` in the run
    directory and submitted as ``sbatch ARGV jobN.sh`` would submit it. The jobs' PATH
    starts with ``<run dir>/bin``, where Corral's ``srun`` is installed: the scripts' steps
    must reach this controller whatever ``srun`` the caller's PATH has (a real Slurm's, or
    none in the controller's own environment)."""
    from corral.frontends.context import local_context
    from corral.frontends.errors import SubmitError
    from corral.frontends.slurm_options import parse_sbatch
    from corral.shims.install import install

    count = [0]
    bin_dir = run_dir / "bin"
    install(bin_dir, force=True, commands=("srun",), compiled=False)
    env = dict(os.environ)
    env["PATH"] = f"{bin_dir}:{env.get('PATH') or '/usr/bin:/bin'}"

    def submit(argv: Sequence[str], script: str) -> int:
        count[0] += 1
        path = run_dir / f"job{count[0]}.sh"
        path.write_text(script)
        extra = [f"--nice={nice}"] if nice else []
        try:
            req = parse_sbatch([*argv, *extra, str(path)], local_context(prog, env=env))
        except SubmitError as exc:
            raise CheckError(exc.message) from None
        return int(client.submit(req.submission.to_json())[0])

    return submit


def run_cluster(client: Any, checks_dir: Path, *, nodes: str | None = None,
                quick: bool = False, wanted: Sequence[str] = ("network", "compute", "storage"),
                work_dir: Path | None = None, override: Mapping[str, Any] | None = None,
                drain: bool = False, nice: int | None = None, prog: str = "corral check",
                note: Callable[[str], None] | None = None,
                trigger: str = "command") -> dict[str, Any]:
    """Run the checks and return the run's record (also kept as ``result.json``)."""
    from corral.checks.pingpong import BuildError, build
    from corral.checks.report import run_record, write_report
    from corral.checks.runner import CHECKS, RunPlan, run_checks
    from corral.checks.verdict import Limits, leaf_switches, pairs_to_measure, verdicts

    bad = [c for c in wanted if c not in CHECKS]
    if bad or not wanted:
        raise CheckError(f"--checks: unknown {', '.join(bad) or '(none given)'}; choose from "
                         f"{', '.join(CHECKS)}")
    recs = client.nodes()
    config = client.cluster_config()
    settings: dict[str, Any] = dict(config.get("checks") or {})
    settings.update(override or {})
    known = {n["name"]: n for n in recs}
    if nodes:
        names = _expand(nodes)
        unknown = [n for n in names if n not in known]
        if unknown:
            raise CheckError(f"--nodes: unknown node(s) {', '.join(unknown)}; nodes are "
                             f"{', '.join(sorted(known)) or 'none'}")
    else:
        names = sorted(n for n, r in known.items()
                       if r.get("connected") and str(r.get("state")) in USABLE)
    if not names:
        raise CheckError("no usable nodes to check")
    limits = Limits(**{k: settings[k] for k in Limits.__dataclass_fields__
                       if settings.get(k) is not None})
    run_id = time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}-{time.monotonic_ns() % 1000:03d}"
    base = work_dir or Path(settings.get("work_dir") or checks_dir / "runs")
    run_dir = base / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    os.chmod(run_dir, 0o755)
    exe = None
    pairs: list[tuple[str, str]] = []
    if "network" in wanted and len(names) >= 2:
        try:
            cached = build(str(settings.get("mpicc") or "mpicc.mpich"), checks_dir / "bin")
        except BuildError as exc:
            raise CheckError(str(exc)) from None
        exe = run_dir / "pingpong"
        exe.write_bytes(cached.read_bytes())
        os.chmod(exe, 0o755)
        pairs = pairs_to_measure(names, int(settings.get("max_pairs") or 64),
                                 leaf_switches(config))
    elif "network" in wanted and note is not None:
        note(f"{prog}: one node: no ping-pong pair to measure")
    plan = RunPlan(run_id, run_dir, tuple(names), tuple(pairs), tuple(wanted), quick, settings)
    started = time.time()
    if note is not None:
        note(f"{prog}: run {run_id}: {', '.join(wanted)} on {len(names)} node(s), "
             f"{len(pairs)} pair(s); files in {run_dir}")
    node_res, links, together, job_ids = run_checks(
        plan, submitter(client, run_dir, prog, nice),
        lambda jid: str(client.job(jid)["state"]),
        {n: int(known[n].get("cpus") or 1) for n in names},
        exe, float(settings.get("timeout_s") or 1800), lambda jid: client.cancel([jid]))
    expected = {n: (int(known[n].get("gpus") or 0), dict(known[n].get("gpu_types") or {}))
                for n in names}
    found = verdicts(node_res, links, limits, together, expected)
    record = run_record(run_id, started, time.time(), node_res, links, found,
                        {"nodes": names, "checks": list(wanted), "quick": quick,
                         "pairs": [list(p) for p in pairs], "jobs": job_ids,
                         "run_dir": str(run_dir), "limits": limits.__dict__,
                         "settings": settings, "trigger": trigger}, together)
    drained: list[str] = []
    if drain:
        for v in found:
            if v.subject in known and v.subject not in drained:
                client.drain(v.subject, f"corral check: {v.message}"[:200])
                drained.append(v.subject)
    record["drained"] = drained
    report = write_report(record, checks_dir / "reports" / run_id)
    record["report"] = str(report)
    return record
