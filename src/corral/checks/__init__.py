"""Cluster acceptance checks (``corral check cluster``): benchmarks run as ordinary jobs.

- ``parse``: readers of the programs' outputs (hpcc's ``hpccoutf.txt``, the ping-pong
  program's lines, fio's JSON, the CPU probe) and the theoretical peak of a CPU;
- ``verdict``: pure comparison of every node and link with the cluster's median and with
  ``[checks]`` of ``corral.toml``; outliers named with the measurement that convicts them;
- ``pingpong``: the MPI ping-pong program (C, compiled with ``mpicc`` at check time);
- ``runner``: the job scripts, submission through ``corral.client``, collection;
- ``report``: Markdown report with a node x node bandwidth heat map, run history.
"""
