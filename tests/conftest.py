"""Test plugins shared by every test directory, and what running in parallel needs.

The suite runs on pytest-xdist workers (``scripts/test``: ``-n 2 --dist loadgroup``).
Each test file is one group, so a file's module fixtures (a cluster, a registry) are
built once, on one worker; every multi-host test (``tests/multinode``: network
namespaces, host-wide bridges) is in a single group, so one of them runs at a time. Each
worker's agents put their jobs under their own parent cgroup (``CORRAL_CGROUP_ROOT``), so
two test clusters that both call their node ``testnode`` never share a job's cgroup or a
container's runtime state."""

from __future__ import annotations

import os

import pytest

pytest_plugins = ("tests.pg",)

_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER and "CORRAL_CGROUP_ROOT" not in os.environ:
    os.environ["CORRAL_CGROUP_ROOT"] = f"corral-{_WORKER}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        group = "multinode" if path.startswith("tests/multinode/") else path
        item.add_marker(pytest.mark.xdist_group(group))
