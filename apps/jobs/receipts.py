"""Write receipts: what a worker reports after it claimed a job (contract section 5).

A receipt is a compact JSON-able record keyed by its natural key ``(job_id, attempt)``. Applying
the same receipt twice changes nothing, and a receipt whose attempt is no longer the job's
current one cannot move the job (the attempt number is the fencing token; see
``apps.jobs.services.attempts_apply_finished``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class ResultStored:
    key: str
    size: int
    sha256: str
    content_type: str | None
    http_status: int


@dataclass(frozen=True)
class AttemptFinished:
    job_id: str
    attempt: int
    outcome: str  # AttemptOutcome value
    finished_at: float  # Unix seconds
    duration_ms: int
    worker: str = ""
    http_status: int | None = None
    error_class: str | None = None
    error: str | None = None
    # Seconds the target asked us to wait (Retry-After), already converted from an HTTP date.
    retry_after_s: float | None = None
    result: ResultStored | None = field(default=None)

    kind = "attempt_finished"

    @property
    def natural_key(self) -> tuple[str, int]:
        return (self.job_id, self.attempt)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kind"] = self.kind
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AttemptFinished:
        d = dict(d)
        d.pop("kind", None)
        result = d.pop("result", None)
        return cls(**d, result=ResultStored(**result) if result else None)
