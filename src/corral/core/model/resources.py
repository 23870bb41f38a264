"""Resources as a value type: CPUs, memory, GPUs (total and by type) and generic resources.

A ``Resources`` is an immutable bag of counts. GPUs are counted twice on purpose: ``gpus``
is the total regardless of model, and ``gres`` carries ``"gpu:<type>"`` entries for the typed
view (``gpu:a100 = 2``). Other generic resources (``nvme``, ``fpga``...) and licenses
(``license:<name>``) live in ``gres`` as plain names. Arithmetic keeps both views
consistent as long as allocations are built from concrete devices, which the placement
code does.

Invariants: every count is a non-negative ``int`` (subtraction may go negative only through
``sub``; ``fits`` is the check callers must use before subtracting).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

GresItems = tuple[tuple[str, int], ...]


def _norm_gres(items: Mapping[str, int] | Iterable[tuple[str, int]] | None) -> GresItems:
    if not items:
        return ()
    pairs = items.items() if isinstance(items, Mapping) else items
    merged: dict[str, int] = {}
    for name, count in pairs:
        merged[name] = merged.get(name, 0) + int(count)
    return tuple(sorted((k, v) for k, v in merged.items() if v != 0))


@dataclass(frozen=True, slots=True)
class Resources:
    """Counts of consumable resources. ``gres`` is a sorted tuple of ``(name, count)``."""

    cpus: int = 0
    mem_mb: int = 0
    gpus: int = 0
    gres: GresItems = field(default=())

    @staticmethod
    def of(
        cpus: int = 0,
        mem_mb: int = 0,
        gpus: int = 0,
        gres: Mapping[str, int] | Iterable[tuple[str, int]] | None = None,
    ) -> Resources:
        return Resources(int(cpus), int(mem_mb), int(gpus), _norm_gres(gres))

    @property
    def gres_map(self) -> dict[str, int]:
        return dict(self.gres)

    def gres_count(self, name: str) -> int:
        for k, v in self.gres:
            if k == name:
                return v
        return 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.cpus + other.cpus,
            self.mem_mb + other.mem_mb,
            self.gpus + other.gpus,
            _norm_gres(list(self.gres) + list(other.gres)),
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.cpus - other.cpus,
            self.mem_mb - other.mem_mb,
            self.gpus - other.gpus,
            _norm_gres(list(self.gres) + [(k, -v) for k, v in other.gres]),
        )

    def scale(self, factor: int) -> Resources:
        return Resources(
            self.cpus * factor,
            self.mem_mb * factor,
            self.gpus * factor,
            tuple((k, v * factor) for k, v in self.gres),
        )

    def fits(self, capacity: Resources) -> bool:
        """True when every count of ``self`` is at most the matching count of ``capacity``."""
        if self.cpus > capacity.cpus or self.mem_mb > capacity.mem_mb or self.gpus > capacity.gpus:
            return False
        if not self.gres:
            return True
        cap = dict(capacity.gres)
        return all(v <= cap.get(k, 0) for k, v in self.gres)

    def is_zero(self) -> bool:
        return self.cpus == 0 and self.mem_mb == 0 and self.gpus == 0 and not self.gres

    def nonnegative(self) -> bool:
        return (
            self.cpus >= 0
            and self.mem_mb >= 0
            and self.gpus >= 0
            and all(v >= 0 for _, v in self.gres)
        )

    def tres_string(self, nodes: int | None = None) -> str:
        """Slurm-style TRES string, e.g. ``cpu=4,mem=8000M,node=1,gres/gpu=2``."""
        parts = [f"cpu={self.cpus}", f"mem={self.mem_mb}M"]
        if nodes is not None:
            parts.append(f"node={nodes}")
        if self.gpus:
            parts.append(f"gres/gpu={self.gpus}")
        for k, v in self.gres:
            if k.startswith("license:"):
                parts.append(f"license/{k[8:]}={v}")
            else:
                parts.append(f"gres/{k}={v}")
        return ",".join(parts)


ZERO = Resources()
