"""Corral: a workload manager for HPC clusters and HPC clouds."""

__version__ = "0.1.0"
