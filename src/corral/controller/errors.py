"""API errors: a stable code, an HTTP status and a precise message (plus Slurm's wording)."""

from __future__ import annotations

from typing import Any

STATUS = {
    "invalid": 400,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "too_large": 413,
    "rejected": 422,
    "rate_limited": 429,
    "unavailable": 503,
    "internal": 500,
}


class ApiError(Exception):
    def __init__(self, code: str, message: str, *, slurm: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.slurm = slurm  # Slurm's own message for the same error, for the shims

    @property
    def status(self) -> int:
        return STATUS.get(self.code, 400)

    def to_json(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.slurm:
            err["slurm"] = self.slurm
        return {"error": err}


JOB_ID_MAX = 2 ** 63 - 1


def is_number(text: str) -> bool:
    """ASCII digits only (``str.isdigit`` also accepts ``¹`` and ``①``, which ``int``
    then refuses), at most 19 of them."""
    return text.isascii() and text.isdigit() and len(text) <= 19


def job_number(text: str, ref: object = None) -> int:
    """A job (or task, step) number from an id reference, or a 400 naming the reference."""
    if not is_number(text) or int(text) > JOB_ID_MAX:
        raise ApiError("invalid", f"Invalid job id {ref if ref is not None else text}",
                       slurm="Invalid job id specified")
    return int(text)
