"""VM jobs on the agent: the launcher that runs a job in a qemu/KVM guest (``launcher``),
its command line (``qemu``), the QMP client (``qmp``), the supervisor's hooks (``job``)
and node discovery (``discover``). ``docs/vms.md`` describes the whole."""
