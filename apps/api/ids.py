"""Job ids as the API takes them: in a path or a parameter, any string; one that is not a UUID is
the id of no job (the reads answer 404, never 400)."""

from __future__ import annotations

import uuid


def parse_job_id(job_id: uuid.UUID | str) -> uuid.UUID | None:
    if isinstance(job_id, uuid.UUID):
        return job_id
    try:
        return uuid.UUID(job_id)
    except (ValueError, TypeError, AttributeError):
        return None
