"""Plain data of the scheduling core: resources, nodes, partitions, QOS, accounts, jobs."""

from corral.core.model.account import ROOT_ACCOUNT, Account, AccountTree, Association
from corral.core.model.job import (
    Allocation,
    Dependency,
    DependencyKind,
    DependencySpec,
    HoldKind,
    Job,
    JobSpec,
    JobState,
    NodeAllocation,
    TaskGroup,
)
from corral.core.model.node import GpuSpec, Node, NodeSpec, NodeState, NumaDomain
from corral.core.model.partition import (
    Partition,
    PartitionState,
    PreemptMode,
    Qos,
    QosLimits,
)
from corral.core.model.resources import ZERO, Resources
from corral.core.model.transitions import (
    IllegalTransition,
    JobEvent,
    NodeEvent,
    job_transition,
    node_transition,
)

__all__ = [
    "ROOT_ACCOUNT", "Account", "AccountTree", "Association", "Allocation", "Dependency",
    "DependencyKind", "DependencySpec", "HoldKind", "Job", "JobSpec", "JobState",
    "NodeAllocation", "TaskGroup", "GpuSpec", "Node", "NodeSpec", "NodeState", "NumaDomain",
    "Partition", "PartitionState", "PreemptMode", "Qos", "QosLimits", "ZERO", "Resources",
    "IllegalTransition", "JobEvent", "NodeEvent", "job_transition", "node_transition",
]
