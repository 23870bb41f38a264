"""Slurm-style reason codes for pending jobs and rejections (``squeue %r`` spelling)."""

from __future__ import annotations

# waiting: can run later
PRIORITY = "Priority"
RESOURCES = "Resources"
DEPENDENCY = "Dependency"
DEPENDENCY_NEVER = "DependencyNeverSatisfied"
HELD_USER = "JobHeldUser"
HELD_ADMIN = "JobHeldAdmin"
BEGIN_TIME = "BeginTime"
ARRAY_LIMIT = "JobArrayTaskLimit"
PARTITION_DOWN = "PartitionDown"
PARTITION_INACTIVE = "PartitionInactive"
LICENSES = "Licenses"
REQ_NODE_NOT_AVAIL = "ReqNodeNotAvail"
NODE_DOWN = "NodeDown"
RESERVATION = "Reservation"  # its advance reservation has not started (or is gone)
RESERVED_MAINT = "ReqNodeNotAvail, Reserved for maintenance"
PREEMPTING = "Resources"  # Slurm shows Resources while victims are being preempted

# can never run as asked (Reject)
INVALID_PARTITION = "InvalidPartition"
INVALID_ACCOUNT = "InvalidAccount"
INVALID_QOS = "InvalidQOS"
PARTITION_TIME_LIMIT = "PartitionTimeLimit"
PARTITION_NODE_LIMIT = "PartitionNodeLimit"
PARTITION_CONFIG = "PartitionConfig"  # e.g. account or QOS not allowed in the partition
BAD_CONSTRAINTS = "BadConstraints"
BAD_LICENSES = "BadLicenses"
NODE_CONFIG = "ReqNodeNotAvail"  # named nodes that do not exist
RESOURCES_NEVER = "NodeConfigUnavailable"  # no node configuration could ever satisfy it
