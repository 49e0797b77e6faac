"""The intake INSERT without the ORM's per-call compilation.

``Model.save(force_insert=True)`` builds the same 34-column INSERT for every job: quoting each
column, assembling placeholders, walking the compiler. For intake, where that statement is most
of the CPU a submit costs (NFR-2), it is built once from the model's own fields; each
call only asks every field for its database value, exactly as the ORM does (``pre_save`` for
``auto_now``, ``get_db_prep_save`` for JSON and UUIDs), and sends one statement. No model signals
are registered for Job (the style guide keeps logic out of signals), so nothing is skipped.
"""

from __future__ import annotations

import functools

from django.db import connection
from django.db.models import Field

from apps.jobs.models import Job

DATABASE_FILLED = frozenset({"version", "deferred_attempts"})


@functools.cache
def _statement(*, traced: bool) -> tuple[str, tuple[Field, ...]]:
    # The columns only the database fills (jobs_job.version: every write bumps it, NFR-13;
    # deferred_attempts: the fold counts deferrals, NFR-24) are left to it; a column with a
    # database default that intake sets (render) is written. Without a trace context (tracing off, FR-29) its column is left out too: the statement is the one it
    # was before tracing existed, and the row gets NULL.
    fields = tuple(
        f
        for f in Job._meta.concrete_fields
        if f.name not in DATABASE_FILLED and (traced or f.name != "trace_context")
    )
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    return f"INSERT INTO {quote(Job._meta.db_table)} ({columns}) VALUES ({placeholders})", fields


def job_insert(job: Job) -> None:
    """What ``job.save(force_insert=True)`` does for a new job: one INSERT of every column."""
    sql, fields = _statement(traced=job.trace_context is not None)
    params = [f.get_db_prep_save(f.pre_save(job, True), connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
    job.version = 0  # what the database's defaults wrote (apps/jobs/models.py)
    job.deferred_attempts = 0
    job._state.adding = False
    job._state.db = connection.alias
