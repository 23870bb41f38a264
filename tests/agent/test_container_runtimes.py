"""Which program runs a node's container jobs (``corral.agent.runtimes.settings``) and
which jobs go to Apptainer (``corral.agent.apptainer.wanted``), from the tools found."""

from __future__ import annotations

from pathlib import Path

from corral.agent.apptainer import wanted
from corral.agent.runtimes import settings
from corral.containers.config import ContainersConfig, check
from corral.containers.spec import ContainerSpec, parse_bundle, parse_image

RUNC = {"runc": {"path": "/usr/sbin/runc", "version": ""}}
APPT = {"apptainer": {"path": "/usr/bin/apptainer", "version": ""}}


def test_auto_prefers_runc_and_falls_back_to_apptainer(tmp_path: Path) -> None:
    st = settings(ContainersConfig(), str(tmp_path), "n1", tools={**RUNC, **APPT})
    assert (st.runtime, st.apptainer, st.engine) == ("/usr/sbin/runc", "/usr/bin/apptainer",
                                                     "oci")
    st = settings(ContainersConfig(), str(tmp_path), "n1", tools=dict(APPT))
    assert (st.runtime, st.engine) == ("", "apptainer")
    st = settings(ContainersConfig(), str(tmp_path), "n1", tools=dict(RUNC))
    assert (st.apptainer, st.engine) == ("", "oci")


def test_runtime_apptainer_keeps_runc_for_bundles(tmp_path: Path) -> None:
    st = settings(ContainersConfig(runtime="apptainer"), str(tmp_path), "n1",
                  tools={**RUNC, **APPT})
    assert (st.runtime, st.engine) == ("/usr/sbin/runc", "apptainer")
    sif = ContainerSpec(parse_image("/srv/a.sif"))
    reg = ContainerSpec(parse_image("docker://r.example/a:1"))
    bundle = ContainerSpec(parse_bundle("/srv/bundle"))
    assert wanted(sif, st) and wanted(reg, st) and not wanted(bundle, st)
    oci = settings(ContainersConfig(), str(tmp_path), "n1", tools={**RUNC, **APPT})
    assert wanted(sif, oci) and not wanted(reg, oci)  # a SIF always needs Apptainer


def test_a_configured_apptainer_wins_when_it_can_run(tmp_path: Path) -> None:
    wrapper = tmp_path / "apptainer-sid"
    wrapper.write_text("#!/bin/sh\n")
    wrapper.chmod(0o755)
    cfg = ContainersConfig(apptainer=str(wrapper))
    st = settings(cfg, str(tmp_path), "n1", tools={**RUNC, **APPT})
    assert st.apptainer == str(wrapper) and st.tools["apptainer"]["path"] == str(wrapper)
    wrapper.chmod(0o644)  # not executable: not used, and not reported
    st = settings(cfg, str(tmp_path), "n1", tools=dict(RUNC))
    assert st.apptainer == "" and "apptainer" not in st.tools
    assert check(ContainersConfig(apptainer="bin/apptainer")) == [
        ("apptainer", "must be an absolute path, got 'bin/apptainer'")]
