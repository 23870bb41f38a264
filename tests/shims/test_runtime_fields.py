"""The runtime class in ``squeue -O runtime`` and ``sacct -o Runtime`` (Corral's own
field names; Slurm has none for it)."""

from __future__ import annotations

from corral.shims.sacct_fields import FIELDS, Row
from corral.shims.squeue_fields import LONG_FIELDS


def test_squeue_and_sacct_runtime_fields() -> None:
    head, get = LONG_FIELDS["runtime"]
    assert head == "RUNTIME"
    assert get({"runtime": "vm"}, 0.0) == "vm" and get({}, 0.0) == "host"
    name, width, sget = FIELDS["runtime"]
    assert (name, width) == ("Runtime", 9)
    assert sget(Row({"runtime": "vm"}, None, 0.0)) == "vm"
    assert sget(Row({"runtime": "vm"}, {"id": "batch"}, 0.0)) == ""  # job lines only
