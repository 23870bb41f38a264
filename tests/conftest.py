"""Test plugins shared by every test directory, and what running in parallel needs.

The suite runs on pytest-xdist workers (``scripts/test``: ``-n 2 --dist loadgroup``).
Each test file is one group, so a file's module fixtures (a cluster, a registry) are
built once, on one worker; every multi-host test (``tests/multinode``: network
namespaces, host-wide bridges) is in a single group, so one of them runs at a time. Each
test process's agents put their jobs under their own parent cgroup (``CORRAL_CGROUP_ROOT``,
named after the process: two workers, or two sessions testing on one machine at once, both
have workers called ``gw0``), so two test clusters that both call their node ``testnode``
and both run a job 1 never share its cgroup or its container's runtime state; the
parent's empty directories are removed when the process ends."""

from __future__ import annotations

import os

import pytest

pytest_plugins = ("tests.pg",)

_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
_OWN_ROOT = ""
if "CORRAL_CGROUP_ROOT" not in os.environ:
    _OWN_ROOT = f"corral-{_WORKER or 'main'}-{os.getpid()}"
    os.environ["CORRAL_CGROUP_ROOT"] = _OWN_ROOT


def pytest_unconfigure(config: pytest.Config) -> None:
    """This process's parent cgroups, where empty (bottom up; busy ones stay)."""
    if not _OWN_ROOT:
        return
    bases = ["/sys/fs/cgroup"] + [os.path.join("/sys/fs/cgroup", d) for d in
                                  (os.listdir("/sys/fs/cgroup")
                                   if os.path.isdir("/sys/fs/cgroup") else [])]
    for base in bases:
        top = os.path.join(base, _OWN_ROOT)
        if not os.path.isdir(top):
            continue
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda t: -len(t[0])):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        group = "multinode" if path.startswith("tests/multinode/") else path
        item.add_marker(pytest.mark.xdist_group(group))
