"""Parsers of the notations every front end shares (pure; one module per notation).

Each raises ``ParseError`` (a ``ValueError``) whose message names the rejected text and the
reason; ``ParseError.slurm_message`` carries Slurm's own wording where it has one.
"""

from corral.core.parse.arrayspec import ArraySpec, format_array, parse_array
from corral.core.parse.constraint import (
    Constraint,
    ConstraintError,
    compile_constraint,
    matches,
    parse_constraint,
)
from corral.core.parse.dependency import format_dependency, parse_dependency
from corral.core.parse.errors import ParseError
from corral.core.parse.gres import GresRequest, format_gres, gpu_request, parse_gpus, parse_gres
from corral.core.parse.hostlist import compress, expand
from corral.core.parse.memory import (
    format_mem_mb,
    format_pbs_size_bytes,
    format_pbs_size_mb,
    parse_mem_mb,
    parse_pbs_size_bytes,
    parse_pbs_size_mb,
)
from corral.core.parse.timefmt import (
    format_pbs_walltime_s,
    format_squeue_time_s,
    format_time_s,
    parse_pbs_walltime_s,
    parse_time_limit_s,
    parse_time_s,
)

__all__ = [
    "ArraySpec", "format_array", "parse_array", "Constraint", "ConstraintError",
    "compile_constraint", "matches", "parse_constraint", "format_dependency",
    "parse_dependency", "ParseError", "GresRequest", "format_gres", "gpu_request",
    "parse_gpus", "parse_gres", "compress", "expand", "format_mem_mb",
    "format_pbs_size_bytes", "format_pbs_size_mb", "parse_mem_mb", "parse_pbs_size_bytes",
    "parse_pbs_size_mb", "format_pbs_walltime_s", "format_squeue_time_s", "format_time_s",
    "parse_pbs_walltime_s", "parse_time_limit_s", "parse_time_s",
]
