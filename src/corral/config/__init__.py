"""``corral.toml``: the cluster configuration (schema, loading, validation).

``load_config(path) -> ClusterConfig``; ``ClusterConfig.to_scheduler_config()`` gives the
core's ``SchedulerConfig``. Every key is documented in ``docs/configuration.md``.
"""

from corral.config.load import ConfigError, config_to_json, load_config, parse_config
from corral.config.schema import (
    AccountConfig,
    AgentConfig,
    ClusterConfig,
    ControllerConfig,
    LimitsConfig,
    NodeConfig,
    PartitionConfig,
    PreemptionSection,
    QosConfig,
    SchedulerSection,
    UserConfig,
    WeightsSection,
)

__all__ = [
    "ConfigError", "config_to_json", "load_config", "parse_config", "AccountConfig",
    "AgentConfig", "ClusterConfig", "ControllerConfig", "LimitsConfig", "NodeConfig",
    "PartitionConfig", "PreemptionSection", "QosConfig", "SchedulerSection", "UserConfig",
    "WeightsSection",
]
