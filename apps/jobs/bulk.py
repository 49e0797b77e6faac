"""Bulk intake's write (issue 12, contract 7): one part of a batch goes into ``jobs_job`` with a
binary ``COPY`` into an unlogged staging table and one ``INSERT … SELECT`` from it.

The staging table is created, filled, merged and dropped inside the caller's transaction: a
loader killed mid-part leaves neither a half-merged part nor a stray table behind (PostgreSQL
rolls the CREATE back with the rest). Unlogged, so the staged rows cost no WAL; only the merged
job rows do, as every job row does.

The merge's natural key is (batch_id, batch_row) (the partial unique index jobs_unique_batch_row):
a part merged twice, by a loader whose lease was taken over or by a retry, inserts nothing the
second time. Loaded jobs are ordinary outbox rows (``published_at`` empty, ``queued``): the
publisher dispatches them with the same per-tenant fairness as jobs submitted one by one.

``STAGE_COLUMNS`` and ``MERGE_VALUES`` are the only lists of columns: a new job column that a
batch row carries is one line in each.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence

from django.db import connection

# What a batch row brings, in COPY order: (column, staging type). Job ids travel as 16 raw bytes
# (bytea), which a Parquet part holds as they are; the merge turns them into uuid.
STAGE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "bytea"),
    ("batch_row", "int4"),
    ("url", "text"),
    ("domain", "text"),
    ("method", "text"),
    ("headers", "text"),
    ("body", "text"),
    ("priority", "text"),
    ("callback_url", "text"),
    ("max_attempts", "int4"),
    ("timeout_s", "int4"),
    ("max_age_s", "int4"),
)

# jobs_job column -> the SQL that fills it from the staging row ``s``; every NOT NULL column of a
# new job is here (what apps/jobs/intake.py's job_create gives one: an outbox row, no attempts).
MERGE_VALUES: dict[str, str] = {
    "id": "encode(s.id, 'hex')::uuid",
    "tenant_id": "%(tenant_id)s",
    "batch_id": "%(batch_id)s",
    "batch_row": "s.batch_row",
    "url": "s.url",
    "domain": "s.domain",
    "method": "s.method",
    "headers": "s.headers::jsonb",
    "body": "s.body",
    "priority": "s.priority",
    "callback_url": "s.callback_url",
    "max_attempts": "s.max_attempts",
    "attempt_budget": "s.max_attempts",
    "timeout_s": "s.timeout_s",
    "max_age_s": "s.max_age_s",
    "status": "'queued'",
    "attempts": "0",
    "created_at": "now()",
    "updated_at": "now()",
}


def _stage_name(batch_id: uuid.UUID, part: int) -> str:
    return f"jobs_bulk_stage_{batch_id.hex}_{part}"


def jobs_bulk_merge(
    *, tenant_id: uuid.UUID, batch_id: uuid.UUID, part: int, rows: Iterable[Sequence[object]]
) -> int:
    """Stage ``rows`` (tuples in ``STAGE_COLUMNS`` order) and merge them into jobs_job; returns
    how many jobs were inserted (fewer than the rows when some were merged before).

    Must run inside a transaction (``transaction.atomic``): the staging table lives and dies in
    it, and the caller records the part as loaded in the same transaction."""
    if not connection.in_atomic_block:
        raise RuntimeError("jobs_bulk_merge needs the caller's transaction")
    stage = connection.ops.quote_name(_stage_name(batch_id, part))
    columns = ", ".join(f"{name} {kind}" for name, kind in STAGE_COLUMNS)
    targets = ", ".join(MERGE_VALUES)
    values = ", ".join(MERGE_VALUES.values())
    with connection.cursor() as cur:
        cur.execute(f"CREATE UNLOGGED TABLE {stage} ({columns})")
        names = ", ".join(name for name, _ in STAGE_COLUMNS)
        raw = cur.cursor  # psycopg's own cursor: Django's wrapper has no COPY
        with raw.copy(f"COPY {stage} ({names}) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types([kind for _, kind in STAGE_COLUMNS])
            for row in rows:
                copy.write_row(row)
        # jobs_bulk_merge: conflicts on jobs_unique_batch_row (the natural key).
        cur.execute(
            f"""
            INSERT INTO jobs_job ({targets})
            SELECT {values} FROM {stage} s
                ON CONFLICT (batch_id, batch_row) WHERE batch_id IS NOT NULL DO NOTHING
            """,
            {"tenant_id": tenant_id, "batch_id": batch_id},
        )
        inserted = cur.rowcount
        cur.execute(f"DROP TABLE {stage}")
    return inserted


def batch_job_counts(*, batch_id: uuid.UUID) -> dict[str, int]:
    """A batch's jobs by status (GET /batches/{id}); served by jobs_unique_batch_row."""
    with connection.cursor() as cur:
        cur.execute("SELECT status, count(*) FROM jobs_job WHERE batch_id = %s GROUP BY status", [batch_id])
        return {status: n for status, n in cur.fetchall()}
