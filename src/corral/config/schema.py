"""The ``corral.toml`` schema as typed frozen dataclasses, with defaults for one machine.

Every key is documented in ``docs/configuration.md``; the loader (``load.py``) maps TOML
tables onto these classes by field name and rejects unknown keys. Durations are seconds
(``*_s``) and sizes megabytes (``*_mb``); the loader also accepts Slurm syntax strings for
them (``"1-00:00:00"``, ``"4G"``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from corral.checks.settings import ChecksConfig
from corral.config.lifecycle import HealthCheckConfig, MailConfig, ScriptsConfig
from corral.config.power import PowerConfig
from corral.containers.config import ContainersConfig
from corral.core.config import (
    BackfillMode,
    FairshareAlgorithm,
    Ordering,
    PlacementMode,
    PreemptType,
    PriorityWeights,
    SchedulerConfig,
)
from corral.core.model.account import Account, AccountTree, Association
from corral.core.model.partition import (
    Partition,
    PartitionState,
    PreemptMode,
    Qos,
    QosLimits,
)
from corral.core.model.resources import Resources
from corral.vmimage.settings import VmConfig


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    listen: str | None = None  # "host:port" for HTTP/TCP (agents on other hosts, remote users)
    tls: bool = False  # serve the TCP listener as HTTPS/WSS with the cluster CA (corral.tls)
    tls_names: tuple[str, ...] = ()  # extra DNS names/addresses for the server certificate
    socket: str | None = None  # Unix socket path; default <state_dir>/corral.sock
    database_url: str | None = None  # default sqlite:///<state_dir>/corral.db
    # high availability (PostgreSQL database_url): this controller's name in the lease
    # (default host:port) and the lease: a standby takes over this long after the
    # leader's last renewal at most (docs/cluster.md, High availability)
    name: str | None = None
    lease_s: float = 3.0
    # a standby re-reads the active jobs and submit keys this often, so a takeover
    # parses only what changed since (corral.controller.warm); 0: load everything at
    # takeover (a cold standby)
    standby_refresh_s: float = 2.0
    schedule_delay_ms: float = 3.0  # coalescing delay after an event before a cycle
    # the controller's own bound on one cycle: at most this many jobs start per cycle
    # (the rest in the next one, run at once), so a burst of thousands of starts is split
    # over cycles; 0: no bound. A [scheduler] max_starts_per_cycle, when set, is used as
    # it is instead (it applies to the simulator too; this one does not)
    cycle_max_starts: int = 1000
    tick_s: float = 5.0  # periodic cycle for time-based things (begin times, age)
    # the garbage collector (controller.heapfreeze): the long-lived heap is frozen this
    # often (0: never, Python's own collector alone), and collected in full this often
    gc_freeze_s: float = 5.0
    gc_full_s: float = 600.0
    node_down_after_s: float = 30.0  # no heartbeat for this long: node DOWN
    node_fail_grace_s: float = 300.0  # DOWN for this long: its jobs NODE_FAIL (or requeue)
    kill_grace_s: int = 30  # KillWait: SIGTERM, then SIGKILL after this
    min_job_age_s: float = 300.0  # finished jobs stay in the active view this long
    first_job_id: int = 1  # FirstJobId: ids start here (never below the highest id stored)
    token_ttl_s: int = 86400  # default lifetime of user tokens
    max_token_ttl_s: int = 30 * 86400  # longest lifetime a token may be minted with
    max_request_mb: int = 8  # the largest request body accepted (413 above it)
    # job events (GET /api/v1/events, corral events): kept this long in the database,
    # and how many streams (SSE or long polls) one user may hold open at once
    event_retention_s: float = 7 * 86400.0
    max_event_streams_per_user: int = 16
    # large arrays (corral.controller.arraytail): pending task records per array at most;
    # the tasks beyond stay one compact record until the scheduler needs them
    array_window: int = 1000
    log_level: str = "info"
    # Volcano Jobs (kubectl), docs/kubernetes.md "Images": "container" runs each task's
    # replicas in its image (as srun --container-image); "host" records the image only and
    # runs the command on the host, which volcano_host_commands = false refuses instead
    volcano_images: str = "container"
    volcano_host_commands: bool = True
    # the Python a Volcano job's launcher (corral.frontends.volcano_run) runs with on the
    # nodes, as the submitting user: "" is the controller's own interpreter; set it where
    # that one is not executable by every user or not installed on the nodes
    volcano_python: str = ""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    heartbeat_s: float = 5.0
    cgroup_root: str | None = None  # None: auto-detect; "" disables cgroups
    poll_ms: float = 10.0  # how often the agent checks its jobs for exits
    pin_cpus: bool = True  # CPU affinity/cpusets to the allocated cores
    reconnect_max_s: float = 5.0  # backoff cap when the controller is unreachable
    # the controllers of an HA cluster (URLs); `corral agent --controller` overrides
    controllers: tuple[str, ...] = ()
    metrics_listen: str | None = None  # "host:port" of the agent's Prometheus /metrics
    # device file of each GPU in index order, as gres.conf File= (default: from NVML);
    # a job cannot open the files of GPUs it was not given (corral.agent.devices)
    gpu_devices: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CgroupConfig:
    """Limits of every job's cgroup on the nodes (the controller puts them into each launch)."""

    max_pids_per_job: int = 4096  # pids.max of a job's cgroup, threads included (0: none)
    # Slurm's cgroup.conf memory knobs (ConstrainRAMSpace, MinRAMSpace, AllowedRAMSpace,
    # ConstrainSwapSpace, AllowedSwapSpace; ``corral.agent.launch.memory_limits_mb``)
    constrain_ram_space: bool = True  # enforce each job's memory on its nodes
    min_ram_space_mb: int = 30  # the lowest memory limit a job gets (Slurm's default)
    allowed_ram_space: float = 100.0  # the limit in percent of the job's memory
    constrain_swap_space: bool = False  # limit RAM + swap too
    allowed_swap_space: float = 0.0  # swap allowed on top, in percent of the job's memory
    # the largest a job's output (or error) file may grow while it runs; past it the job is
    # killed, FAILED with the reason (0: no limit; not a cgroup limit, the supervisor's)
    max_output_mb: int = 0

    def launch_fields(self) -> dict[str, Any]:
        """The ``LaunchRequest`` fields these settings give every launch."""
        return {"max_pids": self.max_pids_per_job,
                "constrain_ram": self.constrain_ram_space,
                "min_ram_mb": self.min_ram_space_mb,
                "allowed_ram_pct": self.allowed_ram_space,
                "constrain_swap": self.constrain_swap_space,
                "allowed_swap_pct": self.allowed_swap_space,
                "max_output_mb": self.max_output_mb}


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """A node; ``discover = true`` takes unset hardware facts from the machine itself."""

    name: str
    discover: bool = False
    cpus: int | None = None  # shorthand: sockets=1, cores_per_socket=cpus, threads_per_core=1
    sockets: int | None = None
    cores_per_socket: int | None = None
    threads_per_core: int | None = None
    mem_mb: int | None = None
    gpus: int | None = None
    gpu_type: str = "gpu"
    features: tuple[str, ...] = ()
    gres: tuple[tuple[str, int], ...] = ()
    switch: str | None = None
    weight: int = 1
    # State=CLOUD: the node does not exist until [power] resume_program creates it; it
    # starts powered down (its hardware must be given: it is planned on before it exists)
    cloud: bool = False
    boot_time_s: int | None = None  # [power] boot_time_s for this node (None: that one)
    uplinks: tuple[str, ...] = ()  # filled from [[switches]] by node_configs(); never set


@dataclass(frozen=True, slots=True)
class SwitchConfig:
    """One switch of the network tree, like a ``SwitchName`` line of Slurm's topology.conf:
    an upper switch lists its child ``switches``, a leaf its ``nodes`` (hostlists). Nodes
    may also name their leaf themselves (``[[nodes]] switch``)."""

    name: str
    switches: str = ""  # hostlist of child switches
    nodes: str = ""  # hostlist of the nodes on this leaf switch


@dataclass(frozen=True, slots=True)
class PartitionConfig:
    name: str
    nodes: str = "ALL"  # hostlist expression, or ALL (every node, registered ones too)
    default: bool = False
    state: PartitionState = PartitionState.UP
    default_time_s: int | None = None
    max_time_s: int | None = None
    max_nodes: int | None = None
    min_nodes: int = 1
    priority_tier: int = 1
    priority_job_factor: int = 1
    preempt_mode: PreemptMode = PreemptMode.OFF
    grace_time_s: int = 0
    allow_accounts: tuple[str, ...] | None = None
    allow_qos: tuple[str, ...] | None = None
    default_mem_per_cpu_mb: int | None = None
    max_mem_per_cpu_mb: int | None = None
    exclusive: bool = False
    runtime: str | None = None  # "vm": every job of the partition runs in a VM


@dataclass(frozen=True, slots=True)
class LimitsConfig:
    """QOS/account limits; ``None`` means no limit. TRES limits are cpus/mem/gpus."""

    max_jobs_per_user: int | None = None
    max_submit_per_user: int | None = None
    max_cpus_per_user: int | None = None
    max_mem_mb_per_user: int | None = None
    max_gpus_per_user: int | None = None
    max_jobs_per_account: int | None = None
    max_cpus_per_account: int | None = None
    grp_jobs: int | None = None
    grp_cpus: int | None = None
    grp_mem_mb: int | None = None
    grp_gpus: int | None = None
    max_cpus_per_job: int | None = None
    max_gpus_per_job: int | None = None
    max_nodes_per_job: int | None = None
    max_wall_s: int | None = None

    def to_model(self) -> QosLimits:
        def tres(c: int | None, m: int | None, g: int | None) -> Resources | None:
            if c is None and m is None and g is None:
                return None
            big = 1 << 62
            return Resources.of(big if c is None else c, big if m is None else m,
                                big if g is None else g)

        return QosLimits(
            max_jobs_per_user=self.max_jobs_per_user,
            max_submit_per_user=self.max_submit_per_user,
            max_tres_per_user=tres(self.max_cpus_per_user, self.max_mem_mb_per_user,
                                   self.max_gpus_per_user),
            max_jobs_per_account=self.max_jobs_per_account,
            max_tres_per_account=tres(self.max_cpus_per_account, None, None),
            grp_jobs=self.grp_jobs,
            grp_tres=tres(self.grp_cpus, self.grp_mem_mb, self.grp_gpus),
            max_tres_per_job=tres(self.max_cpus_per_job, None, self.max_gpus_per_job),
            max_nodes_per_job=self.max_nodes_per_job,
            max_wall_s=self.max_wall_s,
        )


@dataclass(frozen=True, slots=True)
class QosConfig:
    name: str
    priority: int = 0
    preempt: tuple[str, ...] = ()
    preempt_mode: PreemptMode = PreemptMode.CANCEL
    grace_time_s: int = 0
    usage_factor: float = 1.0
    limits: LimitsConfig = field(default_factory=LimitsConfig)


@dataclass(frozen=True, slots=True)
class AccountConfig:
    name: str
    parent: str | None = None  # None: under the root
    shares: int = 1
    limits: LimitsConfig = field(default_factory=LimitsConfig)


@dataclass(frozen=True, slots=True)
class UserConfig:
    name: str
    accounts: tuple[str, ...] = ()
    default_account: str | None = None  # default: the first of ``accounts``
    shares: int = 1
    operator: bool = False


@dataclass(frozen=True, slots=True)
class SchedulerSection:
    """Maps 1:1 onto ``corral.core.config.SchedulerConfig`` (see its docstring)."""

    ordering: Ordering = Ordering.MULTIFACTOR
    backfill: BackfillMode = BackfillMode.EASY
    placement: PlacementMode = PlacementMode.PACK
    fairshare: FairshareAlgorithm = FairshareAlgorithm.FAIR_TREE
    decay_half_life_s: int = 7 * 86400
    bf_window_s: int = 86400
    bf_max_job_test: int = 500
    bf_resolution_s: int = 60
    bf_continue: bool = True
    max_jobs_per_cycle: int | None = None
    max_starts_per_cycle: int | None = None  # [sched_max_job_start]
    default_time_s: int = 3600
    default_mem_per_cpu_mb: int = 0
    max_array_size: int = 4001
    starvation_guard_s: int | None = None


@dataclass(frozen=True, slots=True)
class WeightsSection:
    age: int = 1000
    fairshare: int = 10000
    job_size: int = 1000
    partition: int = 1000
    qos: int = 1000
    assoc: int = 0
    max_age_s: int = 7 * 86400
    favor_small: bool = False
    size_relative: bool = False


@dataclass(frozen=True, slots=True)
class PreemptionSection:
    type: PreemptType = PreemptType.NONE
    mode: PreemptMode = PreemptMode.REQUEUE
    grace_s: int = 0
    allow_suspend: bool = False


DEFAULT_PARTITION = PartitionConfig(name="main", nodes="ALL", default=True)
DEFAULT_QOS = QosConfig(name="normal")


@dataclass(frozen=True, slots=True)
class LicenseConfig:
    """A cluster-wide license pool, like ``Licenses=matlab:4`` in slurm.conf: jobs ask
    with ``-L matlab:1``; the scheduler never hands out more than ``count`` at once."""

    name: str
    count: int


@dataclass(frozen=True, slots=True)
class RateLimitConfig:
    """Per-user token buckets on API requests (Slurm 23.02's ``rl_*`` SlurmctldParameters;
    ``corral.controller.ratelimit``): each user may burst ``bucket_size`` requests and
    then ``refill_rate`` per ``refill_period_s`` seconds; root is not limited."""

    enabled: bool = True  # rl_enable
    bucket_size: int = 500  # rl_bucket_size (Slurm: 30)
    refill_rate: int = 200  # rl_refill_rate: tokens added per period (Slurm: 2)
    refill_period_s: float = 1.0  # rl_refill_period (Slurm: 1)
    table_size: int = 8192  # rl_table_size: users tracked at once


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    cluster_name: str = "corral"
    state_dir: str | None = None  # None: --state-dir / CORRAL_STATE_DIR / per-user default
    operators: tuple[str, ...] = ()  # users with admin rights besides root
    accept_unknown_nodes: bool = True  # agents not listed in [[nodes]] may register
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    cgroup: CgroupConfig = field(default_factory=CgroupConfig)
    scheduler: SchedulerSection = field(default_factory=SchedulerSection)
    weights: WeightsSection = field(default_factory=WeightsSection)
    preemption: PreemptionSection = field(default_factory=PreemptionSection)
    nodes: tuple[NodeConfig, ...] = ()
    partitions: tuple[PartitionConfig, ...] = (DEFAULT_PARTITION,)
    qos: tuple[QosConfig, ...] = (DEFAULT_QOS,)
    accounts: tuple[AccountConfig, ...] = ()
    users: tuple[UserConfig, ...] = ()
    switches: tuple[SwitchConfig, ...] = ()
    licenses: tuple[LicenseConfig, ...] = ()
    checks: ChecksConfig = field(default_factory=ChecksConfig)  # corral check cluster
    scripts: ScriptsConfig = field(default_factory=ScriptsConfig)  # prolog/epilog
    health_check: HealthCheckConfig = field(default_factory=HealthCheckConfig)
    mail: MailConfig = field(default_factory=MailConfig)  # job mail over SMTP
    power: PowerConfig = field(default_factory=PowerConfig)  # power saving, cloud nodes
    containers: ContainersConfig = field(default_factory=ContainersConfig)  # container jobs
    vm: VmConfig = field(default_factory=VmConfig)  # VM jobs (docs/vms.md)
    rate_limit: RateLimitConfig = field(default_factory=RateLimitConfig)

    # ---- views for the scheduling core -----------------------------------------------

    def switch_parents(self) -> dict[str, str]:
        """Child switch -> its parent switch, from ``[[switches]]``."""
        from corral.core.parse.hostlist import expand

        return {child: sw.name for sw in self.switches
                for child in (expand(sw.switches) if sw.switches else [])}

    def switch_leaf_of(self) -> dict[str, str]:
        """Node -> leaf switch, from the ``nodes`` of ``[[switches]]``."""
        from corral.core.parse.hostlist import expand

        return {node: sw.name for sw in self.switches
                for node in (expand(sw.nodes) if sw.nodes else [])}

    def switch_uplinks(self, leaf: str | None,
                       parents: dict[str, str] | None = None) -> tuple[str, ...]:
        """The switches above ``leaf``, nearest first (validated to have no cycles)."""
        up = self.switch_parents() if parents is None else parents
        out: list[str] = []
        cur = leaf
        while cur is not None and cur in up and len(out) <= len(up):
            cur = up[cur]
            out.append(cur)
        return tuple(out)

    def node_configs(self) -> dict[str, NodeConfig]:
        """Configured nodes by name, hostlist names (``n[01-04]``) expanded."""
        from corral.core.parse.hostlist import expand

        out: dict[str, NodeConfig] = {}
        leaf_of = self.switch_leaf_of() if self.switches else {}
        parents = self.switch_parents() if self.switches else {}
        for n in self.nodes:
            for name in expand(n.name):
                switch = n.switch if n.switch is not None else leaf_of.get(name)
                out[name] = dataclasses.replace(
                    n, name=name, switch=switch, uplinks=self.switch_uplinks(switch, parents))
        return out

    def to_scheduler_config(self) -> SchedulerConfig:
        s, w, p = self.scheduler, self.weights, self.preemption
        return SchedulerConfig(
            ordering=s.ordering,
            backfill=s.backfill,
            placement=s.placement,
            weights=PriorityWeights(
                age=w.age, fairshare=w.fairshare, job_size=w.job_size,
                partition=w.partition, qos=w.qos, assoc=w.assoc, max_age_s=w.max_age_s,
                favor_small=w.favor_small, size_relative=w.size_relative,
            ),
            fairshare=s.fairshare,
            decay_half_life_s=s.decay_half_life_s,
            bf_window_s=s.bf_window_s,
            bf_max_job_test=s.bf_max_job_test,
            bf_resolution_s=s.bf_resolution_s,
            bf_continue=s.bf_continue,
            max_jobs_per_cycle=s.max_jobs_per_cycle,
            max_starts_per_cycle=s.max_starts_per_cycle,
            preempt_type=p.type,
            preempt_mode=p.mode,
            preempt_grace_s=p.grace_s,
            allow_suspend=p.allow_suspend,
            default_time_s=s.default_time_s,
            default_mem_per_cpu_mb=s.default_mem_per_cpu_mb,
            max_array_size=s.max_array_size,
            starvation_guard_s=s.starvation_guard_s,
            vm_mem_overhead_mb=self.vm.mem_overhead_mb,
        )

    def partition_models(self, node_names: list[str]) -> tuple[Partition, ...]:
        """Partitions with their node lists resolved against the known nodes."""
        from corral.core.parse.hostlist import expand

        known = set(node_names)
        out = []
        for pc in self.partitions:
            if pc.nodes.strip().upper() == "ALL":
                members = tuple(node_names)
            else:
                members = tuple(n for n in expand(pc.nodes) if n in known)
            out.append(Partition(
                name=pc.name, nodes=members, default_time_s=pc.default_time_s,
                max_time_s=pc.max_time_s, max_nodes=pc.max_nodes, min_nodes=pc.min_nodes,
                priority_tier=pc.priority_tier, priority_job_factor=pc.priority_job_factor,
                preempt_mode=pc.preempt_mode, grace_time_s=pc.grace_time_s,
                is_default=pc.default, state=pc.state,
                allow_accounts=None if pc.allow_accounts is None else frozenset(pc.allow_accounts),
                allow_qos=None if pc.allow_qos is None else frozenset(pc.allow_qos),
                default_mem_per_cpu_mb=pc.default_mem_per_cpu_mb,
                max_mem_per_cpu_mb=pc.max_mem_per_cpu_mb, exclusive=pc.exclusive,
                runtime=pc.runtime,
            ))
        if out and not any(p.is_default for p in out):
            out[0] = dataclasses.replace(out[0], is_default=True)
        return tuple(out)

    def qos_models(self) -> tuple[Qos, ...]:
        return tuple(
            Qos(name=q.name, priority=q.priority, preempt=frozenset(q.preempt),
                preempt_mode=q.preempt_mode, grace_time_s=q.grace_time_s,
                usage_factor=q.usage_factor, limits=q.limits.to_model())
            for q in self.qos
        )

    def account_tree(self) -> AccountTree:
        accounts = tuple(
            Account(name=a.name, parent=a.parent or "root", shares=a.shares,
                    limits=a.limits.to_model())
            for a in self.accounts
        )
        assocs = []
        for u in self.users:
            default = u.default_account or (u.accounts[0] if u.accounts else None)
            for acc in u.accounts:
                assocs.append(Association(user=u.name, account=acc, shares=u.shares,
                                          is_default=acc == default))
        return AccountTree(accounts=accounts, associations=tuple(assocs))

    def default_account(self, user: str) -> str | None:
        for u in self.users:
            if u.name == user:
                return u.default_account or (u.accounts[0] if u.accounts else None)
        return None

    def is_operator(self, user: str) -> bool:
        if user in self.operators:
            return True
        return any(u.name == user and u.operator for u in self.users)
