"""corral.toml loading: defaults, Slurm syntax values, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.config import ConfigError, load_config, parse_config
from corral.core.config import BackfillMode
from corral.core.model.partition import PreemptMode


def test_defaults_fit_one_machine() -> None:
    cfg = load_config(None)
    assert cfg.nodes == () and cfg.accept_unknown_nodes
    parts = cfg.partition_models(["n1", "n2"])
    assert [(p.name, p.nodes, p.is_default) for p in parts] == [("main", ("n1", "n2"), True)]
    sc = cfg.to_scheduler_config()
    assert sc.backfill is BackfillMode.EASY and sc.max_array_size == 4001


def test_full_file_with_slurm_syntax(tmp_path: Path) -> None:
    p = tmp_path / "corral.toml"
    p.write_text('''
cluster_name = "lab"
operators = ["alice"]
[controller]
tick_s = "1:00"
[scheduler]
backfill = "CONSERVATIVE"
default_time_s = "2:00:00"
[[nodes]]
name = "gpu[01-03]"
cpus = 64
mem_mb = "256G"
gpus = 4
gpu_type = "a100"
[[partitions]]
name = "gpu"
nodes = "gpu[01-02]"
max_time_s = "2-00:00:00"
preempt_mode = "requeue"
[[partitions]]
name = "all"
default = true
max_time_s = "UNLIMITED"
[[accounts]]
name = "physics"
shares = 40
[[users]]
name = "bob"
accounts = ["physics"]
''')
    cfg = load_config(p)
    assert cfg.controller.tick_s == 60.0
    assert cfg.scheduler.backfill is BackfillMode.CONSERVATIVE
    assert cfg.to_scheduler_config().default_time_s == 7200
    nodes = cfg.node_configs()
    assert sorted(nodes) == ["gpu01", "gpu02", "gpu03"] and nodes["gpu02"].mem_mb == 256 * 1024
    parts = {x.name: x for x in cfg.partition_models(sorted(nodes))}
    assert parts["gpu"].nodes == ("gpu01", "gpu02") and parts["gpu"].max_time_s == 172800
    assert parts["gpu"].preempt_mode is PreemptMode.REQUEUE and not parts["gpu"].is_default
    assert parts["all"].is_default and parts["all"].max_time_s is None
    assert cfg.default_account("bob") == "physics" and cfg.is_operator("alice")
    tree = cfg.account_tree()
    assert tree.account("physics").shares == 40  # type: ignore[union-attr]


@pytest.mark.parametrize(("data", "key", "words"), [
    ({"partitions": [{"name": "x", "max_tme_s": 3}]}, "partitions[0].max_tme_s",
     "did you mean 'max_time_s'"),
    ({"controller": {"tick_s": "abc"}}, "controller.tick_s", "bad duration"),
    ({"nodes": [{"name": "n1", "cpus": 4}]}, "nodes[0].mem_mb", "required"),
    ({"partitions": [{"name": "a", "default": True}, {"name": "b", "default": True}]},
     "partitions", "more than one default"),
    ({"users": [{"name": "u", "accounts": ["nope"]}]}, "users[0].accounts", "unknown account"),
    ({"scheduler": {"backfill": "sometimes"}}, "scheduler.backfill", "not one of"),
    ({"controller": {"listen": "nowhere"}}, "controller.listen", "host:port"),
    ({"agent": {"heartbeat_s": 30}}, "controller.node_down_after_s", "twice"),
    ({"controller": {"first_job_id": 0}}, "controller.first_job_id", "between 1 and"),
    ({"controller": {"lease_s": 0.1}}, "controller.lease_s", "between 0.5 and 600"),
    ({"controller": {"gc_freeze_s": 0.5}}, "controller.gc_freeze_s", "between 1 and 86400"),
    ({"controller": {"gc_freeze_s": 60, "gc_full_s": 30}}, "controller.gc_full_s",
     "between gc_freeze_s and"),
    ({"nodes": [{"name": "n[1-2]", "cpus": 1, "mem_mb": 1}, {"name": "n2", "cpus": 1,
                                                            "mem_mb": 1}]},
     "nodes[1].name", "duplicate"),
    ({"partitions": [{"name": "p", "nodes": "n[1-"}]}, "partitions[0].nodes", "hostlist"),
])
def test_errors_name_the_key(data: dict, key: str, words: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError) as e:
        parse_config(data)
    assert e.value.key == key, str(e.value)
    assert words in str(e.value)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text("[controller\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(p) in str(e.value) and "TOML" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "missing.toml")
    assert "cannot read" in str(e.value)


SWITCHED = {
    "nodes": [{"name": "n[1-4]", "cpus": 4, "mem_mb": 1000},
              {"name": "n[5-6]", "cpus": 4, "mem_mb": 1000, "switch": "leaf3"}],
    "switches": [{"name": "leaf1", "nodes": "n[1-2]"}, {"name": "leaf2", "nodes": "n[3-4]"},
                 {"name": "spine", "switches": "leaf[1-2]"},
                 {"name": "core", "switches": "spine,leaf3"}],
}


def test_switch_tree_gives_nodes_their_leaf_and_uplinks() -> None:
    confs = parse_config(SWITCHED).node_configs()
    assert (confs["n1"].switch, confs["n1"].uplinks) == ("leaf1", ("spine", "core"))
    assert (confs["n4"].switch, confs["n4"].uplinks) == ("leaf2", ("spine", "core"))
    assert (confs["n6"].switch, confs["n6"].uplinks) == ("leaf3", ("core",))
    from corral.controller.nodes import spec_from_config

    assert spec_from_config(confs["n3"]).uplinks == ("spine", "core")


@pytest.mark.parametrize("change,key,words", [
    ({"switches": [{"name": "a", "switches": "b"}, {"name": "b", "switches": "a"}]},
     "switches", "cycle"),
    ({"switches": [{"name": "a", "switches": "nosuch"}]}, "switches[0].switches",
     "unknown switch"),
    ({"switches": [{"name": "a", "nodes": "n9"}]}, "switches[0].nodes", "unknown node"),
    ({"switches": [{"name": "a", "nodes": "n1"}, {"name": "b", "nodes": "n1"}]},
     "switches[1].nodes", "already on"),
    ({"switches": [{"name": "a", "nodes": "n[1-2]"}, {"name": "b", "nodes": "n3"},
                   {"name": "t1", "switches": "a"}, {"name": "t2", "switches": "a,b"}]},
     "switches[3].switches", "already under"),
    ({"switches": [{"name": "x"}, {"name": "x"}]}, "switches[1].name", "duplicate"),
    ({"switches": [{"name": "a", "nodes": "n5"}]}, "nodes[1].switch", "is on 'a'"),
])
def test_switch_tree_errors(change: dict, key: str, words: str) -> None:  # type: ignore[type-arg]
    data = {**SWITCHED, **change}
    with pytest.raises(ConfigError) as e:
        parse_config(data)
    assert e.value.key == key, str(e.value)
    assert words in str(e.value)


def test_starvation_guard_is_a_scheduler_setting() -> None:
    """``[scheduler] ordering = "sjf"`` with ``starvation_guard_s`` (issue 18): the
    controller's core gets the guarded short-first order; Slurm time strings work."""
    from corral.core.config import Ordering

    sc = parse_config({"scheduler": {"ordering": "sjf",
                                     "starvation_guard_s": "12:00:00"}}).to_scheduler_config()
    assert sc.ordering is Ordering.SJF and sc.starvation_guard_s == 12 * 3600
    assert parse_config({}).to_scheduler_config().starvation_guard_s is None
    with pytest.raises(ConfigError) as e:
        parse_config({"scheduler": {"starvation_guard_s": "soon"}})
    assert e.value.key == "scheduler.starvation_guard_s"


def test_ha_settings() -> None:
    from corral.controller.leadership import ha_settings

    cfg = parse_config({"controller": {"name": "h1", "lease_s": 1.5},
                        "agent": {"controllers": ["http://h1:6817", "http://h2:6817"]}})
    assert ha_settings(cfg) == ("h1", 1.5)
    assert cfg.agent.controllers == ("http://h1:6817", "http://h2:6817")
    assert ha_settings(parse_config({})) == (None, 3.0)
