"""`corral config import-slurm`: real slurm.conf files from the Slurm bench and a richer
hand-written one; the output must load with `corral.config.load_config`."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.main import build_app
from corral.config import load_config, parse_config
from corral.frontends.slurmconf import SlurmConfError, import_slurm_conf, read_conf
from corral.frontends.tomlwrite import dumps

DATA = Path(__file__).parent / "data"
runner = CliRunner()
app = build_app()


@pytest.mark.parametrize("name", ["bench-slurm.conf", "bench-slurm-tuned.conf",
                                  "bench-slurm-multi.conf"])
def test_bench_confs_translate_and_load(name: str, tmp_path: Path) -> None:
    out = tmp_path / "corral.toml"
    res = runner.invoke(app, ["config", "import-slurm", str(DATA / name), "-o", str(out)])
    assert res.exit_code == 0, res.output
    cfg = load_config(out)
    assert cfg.cluster_name == "anchor"
    assert [p.name for p in cfg.partitions] == ["debug"] and cfg.partitions[0].default
    assert cfg.partitions[0].max_time_s is None  # MaxTime=INFINITE
    assert cfg.scheduler.default_mem_per_cpu_mb == 100
    assert cfg.scheduler.max_array_size == 4001
    nodes = cfg.node_configs()
    total = sum((n.sockets or 1) * (n.cores_per_socket or 0) for n in nodes.values())
    assert total == 64 and all(n.mem_mb for n in nodes.values())
    text = out.read_text()
    assert "# NOT MAPPED:" in text and "AuthType=auth/munge" in text
    assert "not mapped" in res.stderr and "AuthType" in res.stderr


def test_multi_profile_keeps_the_hostlist() -> None:
    res = import_slurm_conf(str(DATA / "bench-slurm-multi.conf"))
    (node,) = res.data["nodes"]
    assert node["name"] == "n[1-4]" and node["cores_per_socket"] == 16
    assert {u.key for u in res.unmapped} >= {"NodeHostname", "NodeAddr", "Port", "State"}


def test_tuned_profile_scheduler_parameters() -> None:
    res = import_slurm_conf(str(DATA / "bench-slurm-tuned.conf"))
    s = res.data["scheduler"]
    assert (s["bf_resolution_s"], s["bf_continue"], s["max_jobs_per_cycle"]) == (600, True, 500)
    assert s["max_starts_per_cycle"] == 200  # sched_max_job_start=200
    assert res.data["controller"]["min_job_age_s"] == 5
    skipped = {u.key for u in res.unmapped}
    assert "SchedulerParameters:bf_interval" in skipped
    assert "SchedulerParameters:batch_sched_delay" in skipped


def test_rich_conf() -> None:
    res = import_slurm_conf(str(DATA / "rich-slurm.conf"))
    d = res.data
    cfg = parse_config(tomllib.loads(dumps(d)))  # valid for the real loader
    assert cfg.cluster_name == "lab"
    nodes = {n["name"]: n for n in d["nodes"]}
    cn = nodes["cn[001-064]"]
    assert (cn["sockets"], cn["cores_per_socket"], cn["threads_per_core"]) == (2, 24, 2)
    assert cn["mem_mb"] == 192000 and cn["features"] == ["avx512", "ib"] and cn["weight"] == 10
    gpu = nodes["gpu[01-04]"]
    assert (gpu["gpus"], gpu["gpu_type"], gpu["gres"]) == (4, "a100", {"nvme": 2})
    assert gpu["mem_mb"] == 512000 and gpu["features"] == ["ib", "a100"]
    assert nodes["fat[1-2]"]["cpus"] == 64 and nodes["fat[1-2]"]["mem_mb"] == 2048000
    assert (nodes["old01"]["gpus"], nodes["old01"]["gpu_type"]) == (2, "k80")
    assert len(cfg.node_configs()) == 64 + 4 + 2 + 1

    parts = {p["name"]: p for p in d["partitions"]}
    assert parts["cpu"] == {
        "name": "cpu", "nodes": "cn[001-064]", "max_time_s": 7 * 86400,
        "default_time_s": 3600, "default": True, "priority_tier": 1,
        "priority_job_factor": 10, "preempt_mode": "OFF", "state": "UP"}
    g = parts["gpu"]
    assert (g["max_time_s"], g["priority_tier"], g["preempt_mode"], g["max_nodes"]) == (
        2 * 86400, 10, "REQUEUE", 2)
    assert g["allow_accounts"] == ["ml", "vision"] and "allow_qos" not in g and g["exclusive"]
    f = parts["fat"]
    assert f["nodes"] == "fat[1-2]"  # NodeSet resolved
    assert (f["default_mem_per_cpu_mb"], f["max_mem_per_cpu_mb"], f["grace_time_s"]) == (
        16000, 32000, 60)
    sc = parts["scavenger"]
    assert sc["nodes"] == "cn[001-064],gpu[01-04]" and sc["state"] == "DRAIN"
    assert "max_time_s" not in sc and sc["preempt_mode"] == "CANCEL"

    s = d["scheduler"]
    assert (s["backfill"], s["ordering"], s["placement"]) == ("easy", "multifactor", "spread")
    assert (s["bf_window_s"], s["bf_max_job_test"], s["bf_resolution_s"]) == (172800, 1000, 120)
    assert (s["max_jobs_per_cycle"], s["decay_half_life_s"]) == (200, 14 * 86400)
    assert (s["default_mem_per_cpu_mb"], s["max_array_size"]) == (2048, 10001)
    assert d["weights"] == {"age": 2000, "fairshare": 50000, "job_size": 500,
                            "partition": 10000, "qos": 3000, "max_age_s": 3 * 86400,
                            "favor_small": True, "size_relative": True}
    assert d["preemption"] == {"type": "partition_prio", "mode": "REQUEUE"}
    assert d["controller"] == {"min_job_age_s": 120, "kill_grace_s": 45,
                               "first_job_id": 5000}

    why = {(u.key, u.value): u for u in res.unmapped}
    assert ("PreemptMode", "GANG") in why
    assert ("PriorityWeightTRES", "CPU=1000,Mem=2000") in why
    assert ("PriorityFlags", "MAX_TRES") in why
    assert ("Hidden", "YES") in why and ("OverSubscribe", "FORCE:4") in why
    assert ("TmpDisk", "100000") in why
    assert ("SchedulerParameters:bf_interval", "30") in why
    gres = why[("Gres", "gpu:k80:2,gpu:p100:1")]
    assert "one gpu_type per node" in gres.reason
    assert gres.where.endswith("nodes.conf:6")  # names the included file and line
    assert why[("AuthType", "auth/munge")].where.endswith("rich-slurm.conf:4")


def test_reader_details(tmp_path: Path) -> None:
    conf = tmp_path / "s.conf"
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.conf").write_text("NodeName=a1 CPUs=2 RealMemory=100\n")
    (tmp_path / "sub" / "b.conf").write_text("NodeName=b1 CPUs=2 RealMemory=100\n")
    conf.write_text('ClusterName="my cluster" # note\nInclude sub/*.conf\n'
                    "PartitionName=p Nodes=a1,b1 \\\n  Default=YES\n")
    lines = read_conf(str(conf))
    assert [dict(line.pairs) for line in lines] == [
        {"ClusterName": "my cluster"},
        {"NodeName": "a1", "CPUs": "2", "RealMemory": "100"},
        {"NodeName": "b1", "CPUs": "2", "RealMemory": "100"},
        {"PartitionName": "p", "Nodes": "a1,b1", "Default": "YES"},
    ]
    assert lines[3].lineno == 3
    conf.write_text("garbage line\n")
    with pytest.raises(SlurmConfError, match="s.conf:1"):
        read_conf(str(conf))
    conf.write_text("include missing.conf\n")
    with pytest.raises(SlurmConfError, match="cannot read"):
        read_conf(str(conf))


def test_node_without_memory_is_discovered(tmp_path: Path) -> None:
    conf = tmp_path / "s.conf"
    conf.write_text("NodeName=x CPUs=4\nPartitionName=p Nodes=ALL\n")
    res = import_slurm_conf(str(conf))
    assert res.data["nodes"][0]["discover"] is True
    assert any("RealMemory" in n for n in res.notes)
    parse_config(tomllib.loads(dumps(res.data)))


def test_topology_conf_next_to_slurm_conf(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("TopologyPlugin=topology/tree\n"
                    "NodeName=n[1-8] CPUs=4 RealMemory=1000\nPartitionName=p Nodes=ALL\n")
    (tmp_path / "topology.conf").write_text(
        "# two leaves under one spine\nSwitchName=s1 Nodes=n[1-4] LinkSpeed=100\n"
        "SwitchName=s2 Nodes=n[5-8]\nSwitchName=spine Switches=s[1-2]\n")
    res = import_slurm_conf(str(conf))
    assert res.data["switches"] == [{"name": "s1", "nodes": "n[1-4]"},
                                    {"name": "s2", "nodes": "n[5-8]"},
                                    {"name": "spine", "switches": "s[1-2]"}]
    assert res.data["scheduler"]["placement"] == "topology"
    cfg = parse_config(tomllib.loads(dumps(res.data)))
    assert cfg.node_configs()["n6"].switch == "s2"
    assert cfg.node_configs()["n6"].uplinks == ("spine",)
    # an explicit --topology file; a missing one is a clear error
    other = tmp_path / "topo2.conf"
    other.write_text("SwitchName=only Nodes=n[1-8]\n")
    res = runner.invoke(app, ["config", "import-slurm", str(conf), "--topology", str(other),
                              "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["config"]["switches"] == [{"name": "only", "nodes": "n[1-8]"}]
    res = runner.invoke(app, ["config", "import-slurm", str(conf), "--topology",
                              str(tmp_path / "nope.conf")])
    assert res.exit_code != 0 and "nope.conf" in res.output


def test_cli_stdout_json_force_and_errors(tmp_path: Path) -> None:
    conf = str(DATA / "bench-slurm.conf")
    res = runner.invoke(app, ["config", "import-slurm", conf])
    assert res.exit_code == 0 and res.stdout.startswith("# corral.toml translated from")
    assert tomllib.loads(res.stdout)["cluster_name"] == "anchor"
    res = runner.invoke(app, ["config", "import-slurm", conf, "--json"])
    doc = json.loads(res.stdout)
    assert doc["config"]["cluster_name"] == "anchor"
    assert any(u["key"] == "AuthType" for u in doc["unmapped"])
    out = tmp_path / "c.toml"
    out.write_text("keep me")
    res = runner.invoke(app, ["config", "import-slurm", conf, "-o", str(out)])
    assert res.exit_code == 1 and "--force" in res.stderr and out.read_text() == "keep me"
    res = runner.invoke(app, ["config", "import-slurm", conf, "-o", str(out), "--force"])
    assert res.exit_code == 0 and "anchor" in out.read_text()
    res = runner.invoke(app, ["config", "import-slurm", str(tmp_path / "none.conf")])
    assert res.exit_code == 1 and "cannot read" in res.stderr


def test_config_check(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    runner.invoke(app, ["config", "import-slurm", str(DATA / "rich-slurm.conf"), "-o",
                        str(good)])
    res = runner.invoke(app, ["config", "check", str(good)])
    assert res.exit_code == 0 and "OK" in res.stdout and "71 configured node(s)" in res.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text("[[partitions]]\nname = \"a\"\nmax_tme_s = 5\n")
    res = runner.invoke(app, ["config", "check", str(bad)])
    assert res.exit_code == 1 and "max_tme_s" in res.stderr and "did you mean" in res.stderr
    res = runner.invoke(app, ["config", "check", str(bad), "--json"])
    assert res.exit_code == 1 and json.loads(res.stdout)["ok"] is False
    res = runner.invoke(app, ["config", "show", "--file", str(good), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["config"]["cluster_name"] == "lab"
    res = runner.invoke(app, ["config", "show", "--file", str(good)])
    assert tomllib.loads(res.stdout)["cluster_name"] == "lab"


def test_cgroup_conf_next_to_slurm_conf(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("TaskPlugin=task/cgroup,task/affinity\n"
                    "NodeName=n1 CPUs=4 RealMemory=1000\nPartitionName=p Nodes=ALL\n")
    (tmp_path / "cgroup.conf").write_text(
        "CgroupPlugin=autodetect\nConstrainCores=yes\nConstrainRAMSpace=yes\n"
        "MinRAMSpace=64\nAllowedRAMSpace=105\nConstrainSwapSpace=yes\n"
        "AllowedSwapSpace=10\nMaxRAMPercent=90\nConstrainDevices=maybe\n")
    res = import_slurm_conf(str(conf))
    assert res.data["cgroup"] == {"constrain_ram_space": True, "min_ram_space_mb": 64,
                                  "allowed_ram_space": 105.0, "constrain_swap_space": True,
                                  "allowed_swap_space": 10.0}
    why = {u.key: u for u in res.unmapped}
    assert {"CgroupPlugin", "ConstrainCores", "MaxRAMPercent", "ConstrainDevices"} <= set(why)
    assert why["MaxRAMPercent"].where.endswith("cgroup.conf:8")
    cfg = parse_config(tomllib.loads(dumps(res.data)))
    assert cfg.cgroup.min_ram_space_mb == 64 and cfg.cgroup.constrain_swap_space
    fields = cfg.cgroup.launch_fields()
    assert fields["allowed_ram_pct"] == 105.0 and fields["allowed_swap_pct"] == 10.0
    # a site that does not enforce memory (Slurm's default: ConstrainRAMSpace=no)
    (tmp_path / "cgroup.conf").write_text("ConstrainRAMSpace=no\n")
    cli = runner.invoke(app, ["config", "import-slurm", str(conf), "-o",
                              str(tmp_path / "corral.toml")])
    assert cli.exit_code == 0, cli.output
    assert load_config(tmp_path / "corral.toml").cgroup.constrain_ram_space is False
    # no ConstrainRAMSpace at all: Corral still enforces, and says so
    (tmp_path / "cgroup.conf").write_text("ConstrainCores=yes\n")
    res2 = import_slurm_conf(str(conf))
    assert "cgroup" not in res2.data
    assert any("ConstrainRAMSpace" in n for n in res2.notes)


def test_licenses_map_to_license_pools(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=lic\nLicenses=matlab:4,fluent*2,stata\n"
                    "NodeName=n1 CPUs=4 RealMemory=1000\nPartitionName=p Nodes=n1 Default=YES\n")
    out = tmp_path / "corral.toml"
    res = runner.invoke(app, ["config", "import-slurm", str(conf), "-o", str(out)])
    assert res.exit_code == 0, res.output
    cfg = load_config(out)
    assert [(x.name, x.count) for x in cfg.licenses] == [("matlab", 4), ("fluent", 2),
                                                         ("stata", 1)]
    assert "Licenses" not in res.stderr  # mapped, not listed as skipped


def test_bad_license_pools_are_config_errors() -> None:
    from corral.config.load import ConfigError

    for text, key in (('[[licenses]]\nname = "a"\ncount = -1\n', "licenses[0].count"),
                      ('[[licenses]]\nname = "a:b"\ncount = 1\n', "licenses[0].name"),
                      ('[[licenses]]\nname = "a"\ncount = 1\n[[licenses]]\nname = "a"\n'
                       'count = 2\n', "licenses")):
        with pytest.raises(ConfigError) as err:
            parse_config(tomllib.loads(text))
        assert err.value.key.startswith(key), (text, err.value)


def test_prolog_epilog_and_health_check_keys_map(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=life\nProlog=/etc/slurm/prolog.sh\nEpilog=/etc/slurm/epilog.sh\n"
        "TaskProlog=/etc/slurm/tprolog\nTaskEpilog=/etc/slurm/tepilog\n"
        "PrologSlurmctld=/etc/slurm/ctld-prolog\nEpilogSlurmctld=/etc/slurm/ctld-epilog\n"
        "PrologEpilogTimeout=120\nPrologFlags=Alloc,Contain,X11\n"
        "SchedulerParameters=nohold_on_prolog_fail\n"
        "HealthCheckProgram=/usr/sbin/nhc\nHealthCheckInterval=300\n"
        "HealthCheckNodeState=IDLE,CYCLE\nSrunProlog=/etc/slurm/srun-prolog\n"
        "MailProg=/usr/bin/s-nail\nMailDomain=example.org\n"
        "NodeName=n1 CPUs=4 RealMemory=1000\nPartitionName=p Nodes=n1 Default=YES\n")
    out = tmp_path / "corral.toml"
    res = runner.invoke(app, ["config", "import-slurm", str(conf), "-o", str(out)])
    assert res.exit_code == 0, res.output
    cfg = load_config(out)
    s = cfg.scripts
    assert (s.prolog, s.epilog, s.task_prolog, s.task_epilog) == (
        "/etc/slurm/prolog.sh", "/etc/slurm/epilog.sh", "/etc/slurm/tprolog",
        "/etc/slurm/tepilog")
    assert (s.prolog_slurmctld, s.epilog_slurmctld) == ("/etc/slurm/ctld-prolog",
                                                        "/etc/slurm/ctld-epilog")
    assert s.timeout_s == 120 and set(s.flags) == {"alloc", "contain", "nohold"}
    assert (s.mail_prog, s.mail_domain) == ("/usr/bin/s-nail", "example.org")
    assert not s.hold_on_prolog_failure
    h = cfg.health_check
    assert (h.program, h.interval_s, h.node_state) == ("/usr/sbin/nhc", 300, ("idle", "cycle"))
    # what is not mapped is said, with the reason
    assert "X11" in res.stderr and "SrunProlog" in res.stderr
    for key in (": Prolog=", ": Epilog=", "HealthCheckProgram", "PrologEpilogTimeout"):
        assert key not in res.stderr, key


def test_prolog_lists_are_reported_not_guessed() -> None:
    res = import_slurm_conf("x.conf", read_text=lambda p: (
        "Prolog=/etc/slurm/prolog.d/*\nNodeName=n1 CPUs=1 RealMemory=10\n"
        if p == "x.conf" else ""))
    assert "scripts" not in res.data
    assert any(u.key == "Prolog" and "globs" in u.reason for u in res.unmapped)


def test_bad_lifecycle_settings_are_config_errors() -> None:
    from corral.config.load import ConfigError

    for text, key in (('[scripts]\nprolog = "prolog.sh"\n', "scripts.prolog"),
                      ('[scripts]\nflags = ["sometimes"]\n', "scripts.flags"),
                      ('[health_check]\nprogram = "nhc"\n', "health_check.program"),
                      ('[health_check]\nnode_state = ["sleepy"]\n', "health_check.node_state"),
                      ('[health_check]\ntimeout_s = 0\n', "health_check.timeout_s")):
        with pytest.raises(ConfigError) as err:
            parse_config(tomllib.loads(text))
        assert err.value.key == key, (text, err.value)


def test_oci_conf_next_to_slurm_conf_gives_the_container_runtime(tmp_path: Path) -> None:
    """Slurm 22.05's oci.conf (the runc example of its documentation): the runtime maps,
    the command templates' parts Corral does itself are reported with the reason."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("NodeName=n1 CPUs=4 RealMemory=1000\nPartitionName=p Nodes=ALL\n")
    (tmp_path / "oci.conf").write_text(
        'EnvExclude="^(SLURM_CONF|SLURM_CONF_SERVER)="\n'
        'RunTimeQuery="runc --rootless=true --root=/run/user/%U/ state %n.%u.%j.%s.%t"\n'
        'RunTimeKill="runc --rootless=true --root=/run/user/%U/ kill -a %n.%u.%j.%s.%t"\n'
        'RunTimeDelete="runc --rootless=true --root=/run/user/%U/ delete --force '
        '%n.%u.%j.%s.%t"\n'
        'RunTimeRun="runc --rootless=true --root=/run/user/%U/ run %n.%u.%j.%s.%t -b %b"\n')
    res = import_slurm_conf(str(conf))
    assert res.data["containers"] == {"runtime": "runc"}
    why = {u.key: u.reason for u in res.unmapped}
    assert "signals the container's processes" in why["RunTimeKill"]
    assert set(why) >= {"EnvExclude", "RunTimeQuery", "RunTimeKill", "RunTimeDelete"}
    assert any("only the program (runc)" in n for n in res.notes)
    cfg = parse_config(tomllib.loads(dumps(res.data)))
    assert cfg.containers.runtime == "runc"
    # Slurm's Apptainer/Singularity example: the apptainer runtime, its path when absolute
    (tmp_path / "oci.conf").write_text('RunTimeRun="singularity exec --userns %r %@"\n')
    res = import_slurm_conf(str(conf))
    assert res.data["containers"] == {"runtime": "apptainer"}
    assert any("OCI bundles (--container) run with runc" in n for n in res.notes)
    (tmp_path / "oci.conf").write_text(
        'RunTimeRun="/opt/apptainer/bin/apptainer exec --userns %r %@"\n')
    res = import_slurm_conf(str(conf))
    assert res.data["containers"] == {"runtime": "apptainer",
                                      "apptainer": "/opt/apptainer/bin/apptainer"}
    assert parse_config(tomllib.loads(dumps(res.data))).containers.runtime == "apptainer"
    (tmp_path / "oci.conf").write_text('RunTimeRun="enroot start %r"\n')
    res = import_slurm_conf(str(conf))
    assert "containers" not in res.data
    assert [u.reason for u in res.unmapped if u.key == "RunTimeRun"] == [
        "only runc, crun and apptainer run container jobs here"]


def test_rate_limit_and_max_array_size(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=rl\nMaxArraySize=100001\n"
                    "SlurmctldParameters=rl_enable,rl_bucket_size=50,rl_refill_rate=5,"
                    "rl_refill_period=2,enable_configless\n"
                    "NodeName=n1 CPUs=2 RealMemory=1000\nPartitionName=p Nodes=n1 Default=YES\n")
    res = import_slurm_conf(str(conf))
    assert res.data["rate_limit"] == {"enabled": True, "bucket_size": 50, "refill_rate": 5,
                                      "refill_period_s": 2}
    assert res.data["scheduler"]["max_array_size"] == 100001
    assert any(u.value == "enable_configless" for u in res.unmapped)
    cfg = parse_config(tomllib.loads(dumps(res.data)))
    assert (cfg.rate_limit.bucket_size, cfg.rate_limit.refill_period_s) == (50, 2)
    assert cfg.scheduler.max_array_size == 100001

def test_power_saving_keys_and_cloud_nodes_map(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=elastic\nSuspendProgram=/usr/sbin/node-stop\n"
        "ResumeProgram=/usr/sbin/node-start\nSuspendTime=600\nSuspendTimeout=45\n"
        "ResumeTimeout=900\nSuspendExcNodes=head[1-2]\nSuspendExcParts=debug\n"
        "ResumeRate=10\nSuspendRate=0\n"
        "NodeName=head[1-2] CPUs=4 RealMemory=1000\n"
        "NodeName=cloud[1-8] CPUs=16 RealMemory=64000 State=CLOUD\n"
        "PartitionName=debug Nodes=head[1-2]\nPartitionName=burst Nodes=cloud[1-8] "
        "Default=YES\n")
    out = tmp_path / "corral.toml"
    res = runner.invoke(app, ["config", "import-slurm", str(conf), "-o", str(out)])
    assert res.exit_code == 0, res.output
    cfg = load_config(out)
    p = cfg.power
    assert (p.suspend_program, p.resume_program) == ("/usr/sbin/node-stop",
                                                     "/usr/sbin/node-start")
    assert (p.suspend_time_s, p.suspend_timeout_s, p.resume_timeout_s) == (600, 45, 900)
    assert (p.suspend_exc_nodes, p.suspend_exc_parts) == ("head[1-2]", ("debug",))
    nodes = cfg.node_configs()
    assert nodes["cloud3"].cloud and not nodes["head1"].cloud
    assert (p.resume_rate, p.suspend_rate) == (10, 0)  # nodes per minute; 0: no limit
    assert "ResumeRate" not in res.stderr and "State=CLOUD" not in res.stderr


def test_start_cap_and_cycle_bound(tmp_path: Path) -> None:
    """sched_max_job_start maps to [scheduler] max_starts_per_cycle (0, Slurm's default,
    to no cap); the controller's own bound is [controller] cycle_max_starts; both are
    checked when the configuration is read."""
    from corral.config.load import ConfigError

    conf = tmp_path / "slurm.conf"
    base = "ClusterName=c\nNodeName=n1 CPUs=2 RealMemory=1000\nPartitionName=p Nodes=n1\n"
    conf.write_text(base + "SchedulerParameters=sched_max_job_start=0\n")
    assert "max_starts_per_cycle" not in import_slurm_conf(str(conf)).data.get("scheduler", {})
    conf.write_text(base + "SchedulerParameters=sched_max_job_start=-1\n")
    assert any(u.key == "SchedulerParameters:sched_max_job_start"
               for u in import_slurm_conf(str(conf)).unmapped)
    cfg = parse_config(tomllib.loads("[scheduler]\nmax_starts_per_cycle = 64\n"))
    assert cfg.to_scheduler_config().max_starts_per_cycle == 64
    default = parse_config({})
    assert default.to_scheduler_config().max_starts_per_cycle is None  # the simulator's
    assert default.controller.cycle_max_starts == 1000
    for text, key in (("[scheduler]\nmax_starts_per_cycle = 0\n",
                       "scheduler.max_starts_per_cycle"),
                      ("[controller]\ncycle_max_starts = -1\n", "controller.cycle_max_starts")):
        with pytest.raises(ConfigError) as err:
            parse_config(tomllib.loads(text))
        assert err.value.key == key, (text, err.value)
