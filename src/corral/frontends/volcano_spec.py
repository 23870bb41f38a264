"""Job-level fields of a Volcano Job that need more than a copy: ``plugins`` and their
arguments, ``networkTopology``, and a task's ``topologyPolicy``.

* ``plugins``: ``env`` (``VC_TASK_INDEX``/``VK_TASK_INDEX``), ``svc`` (host files and
  ``VC_<TASK>_HOSTS``/``_NUM``) and ``ssh`` (password-less ``ssh`` between the job's
  hosts: ``corral.frontends.volcano_run`` puts an ``ssh`` on the replicas' ``PATH`` that
  runs the command on the named host as a job step, ``srun --overlap -N1 -n1 -w HOST``,
  so ``mpirun``'s ssh launcher reaches every replica's host). Arguments: ``svc``
  ``--publish-not-ready-addresses`` (the host files always list every replica) and
  ``--disable-network-policy`` (replicas are host processes; no network policy confines
  them), ``ssh`` ``--no-root`` (replicas run as the submitting user anyway); each as
  ``--flag`` or ``--flag=true``. Other arguments (key paths, a given private key) are
  refused by name.
* ``networkTopology`` (Volcano 1.12+): ``mode: hard`` with ``highestTierAllowed: 1``
  keeps the whole job under one leaf switch of ``[[switches]]`` (Slurm's
  ``--switches=1`` with no time limit); higher hard tiers are refused (Corral's switch
  limit counts leaf switches, it has no tiers above them). ``mode: soft`` (as few
  switches as the free nodes allow, crossing tiers when they must) is what
  ``[scheduler] placement = "topology"`` does for every multi-node job: accepted on such a
  cluster, refused with that reason on others.
* a task's ``topologyPolicy`` (the kubelet Topology Manager's policies) becomes the task
  group's ``numa_policy``, which the core's placement honours for each replica
  (``corral.core.placement.numa``): ``none`` and ``best-effort`` (the core always takes a
  job's cores from as few NUMA domains as fit, those holding its GPUs first:
  ``corral.core.placement.within``; never a reason to wait), ``restricted`` (each
  replica's cores and GPUs from the fewest domains that could hold it on that node: a
  6-core replica on 4-core domains gets 2, never 3) and ``single-numa-node`` (each
  replica from one domain, its GPUs too where they have NUMA affinity; a node where no
  domain has room now is not a candidate, and a replica larger than every node's
  largest domain is refused at submit).
"""

from __future__ import annotations

from typing import Any, Protocol

API_VERSION = "batch.volcano.sh/v1alpha1"
HOST_IMAGE = "corral.dev/host"  # what exports wrote before: still read as "the host"
PLUGINS = ("env", "svc", "ssh")
PLUGIN_FLAGS = {"svc": ("--publish-not-ready-addresses", "--disable-network-policy"),
                "ssh": ("--no-root",), "env": ()}


class Check(Protocol):
    def bad(self, path: str, message: str, reason: str = ...) -> None: ...

    def unsupported(self, path: str, why: str = "") -> None: ...

    def obj(self, v: Any, path: str) -> dict[str, Any]: ...

    def strings(self, v: Any, path: str) -> list[str]: ...

    def integer(self, v: Any, path: str, low: int = 0) -> int | None: ...

    def only(self, obj: dict[str, Any], path: str, known: tuple[str, ...],
             why: dict[str, str] | None = None) -> None: ...


def plugins(c: Check, raw: Any) -> dict[str, list[str]]:
    """The plugins and their (accepted) arguments."""
    out: dict[str, list[str]] = {}
    for pname, pargs in c.obj(raw, "spec.plugins").items():
        path = f"spec.plugins.{pname}"
        if pname not in PLUGINS:
            c.unsupported(path, "Corral has the env, svc and ssh plugins")
            continue
        args = c.strings(pargs, path)
        for i, arg in enumerate(args):
            flag, _, value = arg.partition("=")
            if flag not in PLUGIN_FLAGS[pname] or value not in ("", "true", "false"):
                known = ", ".join(PLUGIN_FLAGS[pname]) or "none"
                c.unsupported(f"{path}[{i}]", f"argument {arg!r} (Corral takes: {known})")
        out[pname] = args
    return out


def network_topology(c: Check, raw: Any, topology_placement: bool = False) -> int | None:
    """``spec.networkTopology`` as Corral's switch limit (None: no limit);
    ``topology_placement``: the cluster places by switches (soft mode holds)."""
    if raw is None:
        return None
    nt = c.obj(raw, "spec.networkTopology")
    c.only(nt, "spec.networkTopology", ("mode", "highestTierAllowed"))
    mode = nt.get("mode", "hard")
    tier = c.integer(nt.get("highestTierAllowed"), "spec.networkTopology.highestTierAllowed",
                     low=1)
    if mode not in ("hard", "soft"):
        c.bad("spec.networkTopology.mode", f"Unsupported value: {mode!r}: supported values: "
                                           "\"hard\", \"soft\"")
        return None
    if mode == "soft":
        if not topology_placement:
            c.unsupported("spec.networkTopology.mode",
                          "'soft': this cluster does not place jobs by switches ([scheduler] "
                          "placement is not \"topology\"); use mode hard with "
                          "highestTierAllowed 1")
        return None
    if tier is None:
        c.bad("spec.networkTopology.highestTierAllowed", "Required value: with mode hard")
        return None
    if tier != 1:
        c.unsupported("spec.networkTopology.highestTierAllowed",
                      f"{tier}: Corral keeps a job under one leaf switch (tier 1); it has "
                      "no limit by higher tiers")
        return None
    return 1


TOPOLOGY_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")


def topology_policy(c: Check, raw: Any, path: str) -> str:
    """A task's ``topologyPolicy`` as ``TaskGroup.numa_policy`` (``none`` when absent)."""
    if raw is None:
        return "none"
    if raw not in TOPOLOGY_POLICIES:
        c.bad(f"{path}.topologyPolicy", f"Unsupported value: {raw!r}: supported values: "
              + ", ".join(f'"{p}"' for p in TOPOLOGY_POLICIES))
        return "none"
    return str(raw)
