"""``[power]`` of ``corral.toml``: Slurm's power saving and cloud nodes (``SuspendProgram``,
``ResumeProgram``, ``SuspendTime``, ``SuspendTimeout``, ``ResumeTimeout``,
``SuspendExcNodes``, ``SuspendExcParts``, ``ResumeRate``, ``SuspendRate``).
``docs/lifecycle.md`` says what each does."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PowerConfig:
    suspend_program: str = ""  # run with the nodes' host list to power them down
    resume_program: str = ""  # run with the nodes' host list to power them up
    suspend_time_s: int | None = None  # idle this long: powered down (None: never)
    suspend_timeout_s: int = 30  # powering down takes at most this long
    resume_timeout_s: int = 300  # a resumed node not registered by then is DOWN
    suspend_exc_nodes: str = ""  # host list never powered down
    suspend_exc_parts: tuple[str, ...] = ()  # partitions whose nodes are never powered down
    resume_rate: int = 300  # ResumeRate: nodes resumed per minute at most (0: no limit)
    suspend_rate: int = 60  # SuspendRate: nodes powered down per minute at most (0: none)
    # seconds a resumed node takes to register (no Slurm key). 0: a powered-down node is
    # planned on as an idle one and a job is allocated on it at once (Slurm's model, the
    # job waits while it boots); more: it is available only that long after its resume,
    # so estimated starts include the boot and only the nodes planned starts need resume
    boot_time_s: int = 0

    @property
    def enabled(self) -> bool:
        return bool(self.resume_program)


def check_power(p: PowerConfig) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for name in ("suspend_program", "resume_program"):
        path = getattr(p, name)
        if path and not path.startswith("/"):
            out.append((f"power.{name}", f"must be an absolute path, not {path!r}"))
    if p.suspend_time_s is not None and not p.resume_program:
        out.append(("power.resume_program", "is required with suspend_time_s (powered-down "
                    "nodes must be resumable)"))
    if p.suspend_time_s is not None and not p.suspend_program:
        out.append(("power.suspend_program", "is required with suspend_time_s"))
    if p.boot_time_s < 0:
        out.append(("power.boot_time_s", "must be 0 or more seconds"))
    for name in ("resume_rate", "suspend_rate"):
        if getattr(p, name) < 0:
            out.append((f"power.{name}", "must be 0 (no limit) or more nodes per minute"))
    if p.resume_timeout_s <= 0 or p.suspend_timeout_s <= 0:
        out.append(("power", "resume_timeout_s and suspend_timeout_s must be more than 0"))
    return out
