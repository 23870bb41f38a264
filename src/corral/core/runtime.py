"""Runtime classes: where a job's processes run on its node — on the host (``host``), in
a container (``container``) or in a virtual machine (``vm``) — as data the core schedules by.

Rules (one scheduler for all three):

* A job asks for its class (``JobSpec.runtime``); a partition may impose one
  (``Partition.runtime``): a job that asked for the default (``host``) gets the
  partition's, a job that asked for a different one is refused (``BadRuntime``).
* A VM job needs nodes with the ``vm`` feature (the agent advertises it where ``/dev/kvm``
  is usable and qemu is installed): its constraint is and-ed with ``vm``.
* A VM job runs on one node (a VM per node would need a launcher across VMs) and is not a
  task-group gang.
* A VM job's memory on its node is its request plus ``SchedulerConfig.vm_mem_overhead_mb``
  (qemu and the guest kernel's own use): placement counts the sum, the agent's cgroup
  holds the sum, the guest gets the request.
* Cores are counted as for any job: the VM's vCPUs are the allocated CPUs, pinned one to
  one, so VM, container and host jobs on one node never share a core.
"""

from __future__ import annotations

HOST = "host"
CONTAINER = "container"
VM = "vm"
RUNTIMES = (HOST, CONTAINER, VM)
VM_FEATURE = "vm"


class RuntimeConflict(ValueError):
    """The job's runtime class contradicts its partition's."""


def effective_runtime(job_runtime: str, partition_runtime: str | None) -> str:
    """The class a job runs in: its own, or its partition's when it asked for the default."""
    if job_runtime not in RUNTIMES:
        raise RuntimeConflict(f"unknown runtime class {job_runtime!r} "
                              f"(one of {', '.join(RUNTIMES)})")
    if not partition_runtime or partition_runtime == job_runtime:
        return job_runtime
    if job_runtime == HOST:
        return partition_runtime
    raise RuntimeConflict(f"the partition runs {partition_runtime} jobs; this job asks "
                          f"for {job_runtime}")


def with_feature(constraint: str | None, feature: str) -> str:
    """``constraint`` and-ed with ``feature``."""
    if not constraint:
        return feature
    return f"{feature}&({constraint})"
