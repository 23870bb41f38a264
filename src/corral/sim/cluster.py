"""The simulated machine: from an SWF header or from a Corral cluster configuration.

* ``from_header(max_nodes, max_procs)``: ``MaxNodes`` identical nodes of
  ``MaxProcs / MaxNodes`` cores each (or ``MaxProcs`` one-core nodes, or one pool; see
  ``from_header``), one partition ``batch`` holding all of them. An SWF job of ``N``
  processors asks for ``N`` one-core tasks anywhere (``-n N``), so it may share nodes
  with other jobs; with ``whole_nodes`` it takes ``ceil(N / ppn)`` whole nodes
  exclusively (how SDSC-BLUE and RLScheduler's simulator allocate).
* ``from_config(path)``: the nodes (hostlists, sockets/cores, memory, typed GPUs,
  features, switches), partitions, QOS and account tree of a ``corral.toml``, i.e. the
  heterogeneous cluster a site actually runs; its ``[scheduler]`` section is the default
  policy. SWF jobs go to the default partition.

Users and accounts of an SWF trace become ``u<user id>`` and ``g<group id>`` (the SWF
group is the closest thing to an account); ``account_tree_for`` adds an equal-shares tree
of those accounts when the configuration has none, so fair-share has something to share.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from corral.core.config import SchedulerConfig
from corral.core.model.account import Account, AccountTree, Association
from corral.core.model.job import JobSpec
from corral.core.model.node import GpuSpec, Node, NodeSpec
from corral.core.model.partition import Partition, Qos


class ClusterError(ValueError):
    """A machine description that cannot be simulated."""


@dataclass(frozen=True)
class SimCluster:
    nodes: tuple[Node, ...]
    partitions: tuple[Partition, ...]
    qos: tuple[Qos, ...] = ()
    accounts: AccountTree = field(default_factory=AccountTree)
    whole_nodes: bool = False
    procs_per_node: int = 1
    scheduler: SchedulerConfig | None = None  # the configuration's own policy, if any
    description: str = ""
    queue_map: dict[int, str] = field(default_factory=dict)  # SWF queue id -> partition

    @property
    def total_cpus(self) -> int:
        return sum(n.spec.cpus for n in self.nodes)

    @property
    def total_nodes(self) -> int:
        return len(self.nodes)

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)

    def spec_for(self, procs: int, limit_s: int, user: str, account: str | None,
                 queue: int = -1) -> JobSpec:
        """The ``JobSpec`` an SWF job of ``procs`` processors becomes on this machine.

        Its SWF queue number picks the partition through ``queue_map`` (default partition
        when unmapped)."""
        part = self.queue_map.get(queue)
        parts = (part,) if part else ()
        if self.whole_nodes:
            k = -(-procs // self.procs_per_node)
            return JobSpec(name="swf", user=user, account=account, partitions=parts,
                           nodes_min=k, ntasks=procs, exclusive=True, time_limit_s=limit_s)
        return JobSpec(name="swf", user=user, account=account, partitions=parts, nodes_min=1,
                       nodes_max=procs, ntasks=procs, time_limit_s=limit_s)

    def with_queue_map(self, text: str) -> SimCluster:
        """``0=debug,1=batch``: SWF queue numbers to partitions (checked to exist)."""
        names = {p.name for p in self.partitions}
        out: dict[int, str] = {}
        for item in (x.strip() for x in text.split(",") if x.strip()):
            q, sep, name = item.partition("=")
            if not sep or not q.strip().lstrip("-").isdigit() or not name.strip():
                raise ClusterError(f"queue map item {item!r}: use QUEUE=PARTITION, e.g. 0=debug")
            if name.strip() not in names:
                raise ClusterError(f"queue map: partition {name.strip()!r} does not exist "
                                   f"(partitions: {', '.join(sorted(names))})")
            out[int(q)] = name.strip()
        return replace(self, queue_map=out)

    def alloc_cpus_for(self, procs: int) -> int:
        """CPUs an SWF job of ``procs`` processors holds (whole nodes count fully)."""
        if self.whole_nodes:
            return -(-procs // self.procs_per_node) * self.procs_per_node
        return procs

    def with_accounts(self, tree: AccountTree) -> SimCluster:
        return replace(self, accounts=tree)


MACHINES = ("cores", "nodes", "pool")


def from_header(max_nodes: int, max_procs: int, *, whole_nodes: bool = False,
                machine: str = "nodes", pool: bool = False,
                mem_mb_per_core: int = 1024) -> SimCluster:
    """The machine an SWF header describes (see the module docstring).

    ``machine`` picks the model:

    * ``nodes``: ``MaxNodes`` nodes of ``MaxProcs / MaxNodes`` cores;
    * ``cores``: ``MaxProcs`` one-core nodes. An SWF job asks for processors anywhere, so
      this is the same machine for it, node boundaries aside; the core then plans by
      counting free processors (its fast path: on RICC about 5x faster than ``nodes``),
      which is textbook EASY's "extra processors" rule. With ``nodes`` the core's EASY
      reservation holds specific nodes, which can leave fewer backfill holes;
    * ``pool`` (or ``pool=True``): one node of ``MaxProcs`` cores.

    ``whole_nodes`` (a job takes ``ceil(procs/ppn)`` nodes to itself) needs ``nodes``.
    """
    if pool:
        machine = "pool"
    if machine not in MACHINES:
        raise ClusterError(f"machine {machine!r}: use one of {', '.join(MACHINES)}")
    if max_nodes < 1 or max_procs < 1:
        raise ClusterError(f"bad machine size: MaxNodes={max_nodes}, MaxProcs={max_procs}")
    if whole_nodes and machine != "nodes":
        raise ClusterError(f"--whole-nodes needs the nodes machine, not {machine!r}")
    if machine == "pool":
        spec = NodeSpec(name="pool", sockets=1, cores_per_socket=max_procs,
                        mem_mb=max_procs * mem_mb_per_core)
        node = Node(spec, partitions=("batch",))
        part = Partition(name="batch", nodes=("pool",), is_default=True)
        return SimCluster((node,), (part,), procs_per_node=max_procs,
                          description=f"a pool of {max_procs} processors "
                                      f"({max_nodes} nodes in the header)")
    if machine == "cores":
        count, ppn, prefix = max_procs, 1, "c"
        desc = f"{max_procs} processors" + (
            f" ({max_nodes} nodes x {max_procs // max_nodes} in the header)"
            if max_procs != max_nodes else "")
    else:
        if max_procs % max_nodes:
            raise ClusterError(
                f"MaxProcs={max_procs} is not a multiple of MaxNodes={max_nodes}; "
                "use --machine cores or give the machine with --cluster CONFIG"
            )
        count, ppn, prefix = max_nodes, max_procs // max_nodes, "n"
        desc = f"{max_nodes} nodes x {ppn} cores" + (
            " (whole nodes per job)" if whole_nodes else "")
    width = len(str(count))
    nodes = tuple(
        Node(NodeSpec(name=f"{prefix}{i:0{width}d}", sockets=1, cores_per_socket=ppn,
                      mem_mb=ppn * mem_mb_per_core), partitions=("batch",))
        for i in range(1, count + 1)
    )
    part = Partition(name="batch", nodes=tuple(n.name for n in nodes), is_default=True)
    return SimCluster(nodes, (part,), whole_nodes=whole_nodes, procs_per_node=ppn,
                      description=desc)


def from_config(path: str | Path) -> SimCluster:
    """The cluster of a ``corral.toml`` (nodes, partitions, QOS, accounts, scheduler)."""
    from corral.config import load_config
    from corral.core.parse.hostlist import expand

    cfg = load_config(path)
    nodes: list[Node] = []
    confs = cfg.node_configs()
    for nc in cfg.nodes:
        if nc.cpus is not None and nc.sockets is None and nc.cores_per_socket is None:
            sockets, cps = 1, nc.cpus
        else:
            sockets, cps = nc.sockets or 1, nc.cores_per_socket or (nc.cpus or 1)
        tpc = nc.threads_per_core or 1
        gpus = tuple(GpuSpec(index=i, type=nc.gpu_type) for i in range(nc.gpus or 0))
        for name in expand(nc.name):
            spec = NodeSpec(
                name=name, sockets=sockets, cores_per_socket=cps, threads_per_core=tpc,
                mem_mb=nc.mem_mb or sockets * cps * 1024, gpus=gpus,
                features=frozenset(nc.features), gres=tuple(nc.gres),
                switch=confs[name].switch, uplinks=confs[name].uplinks, weight=nc.weight,
            )
            nodes.append(Node(spec))
    if not nodes:
        raise ClusterError(f"{path}: the configuration lists no [[nodes]] to simulate")
    names = [n.name for n in nodes]
    parts = cfg.partition_models(names)
    member: dict[str, list[str]] = {n: [] for n in names}
    for p in parts:
        for n in p.nodes:
            member[n].append(p.name)
    nodes = [replace(n, partitions=tuple(member[n.name])) for n in nodes]
    cores = {n.spec.cpus for n in nodes}
    desc = f"{len(nodes)} nodes from {path} ({sum(n.spec.cpus for n in nodes)} CPUs)"
    return SimCluster(
        tuple(nodes), parts, cfg.qos_models(), cfg.account_tree(),
        procs_per_node=min(cores), scheduler=cfg.to_scheduler_config(), description=desc,
    )


def account_tree_for(pairs: Iterable[tuple[str, str]], base: AccountTree | None = None,
                     ) -> AccountTree:
    """``base`` plus every (account, user) pair of a trace that it lacks, equal shares."""
    base = base or AccountTree()
    have_acc = {a.name for a in base.accounts}
    have_assoc = {(a.account, a.user) for a in base.associations}
    accounts = list(base.accounts)
    assocs = list(base.associations)
    seen_user: set[str] = {a.user for a in base.associations}
    for account, user in sorted(set(pairs)):
        if account not in have_acc:
            accounts.append(Account(name=account, shares=1))
            have_acc.add(account)
        if (account, user) not in have_assoc:
            assocs.append(Association(user=user, account=account, shares=1,
                                      is_default=user not in seen_user))
            have_assoc.add((account, user))
            seen_user.add(user)
    return AccountTree(tuple(accounts), tuple(assocs))
