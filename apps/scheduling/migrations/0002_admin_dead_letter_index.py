"""Indexes behind the dead-letter pages (apps/scheduling/admin.py, selectors.py; issue 13).

A dead letter is a failed job. The grouped page counts them by (domain, last error class, HTTP
status): ``jobs_dead_letter_groups`` holds exactly those keys for failed rows only, so the grouping
reads a small partial index, not the ledger. The one-by-one list is newest failure first:
``jobs_dead_letter_newest``. The expressions match ``dead_letters_annotated`` (``last_error ->>
'class'`` and ``->> 'http_status'``) character for character, or the planner cannot use them.

Raw SQL on jobs_job (like apps/publishing's outbox index), so the jobs model state is untouched;
built CONCURRENTLY so a live ledger is not locked.
"""

from django.db import migrations

INDEXES = {
    "jobs_dead_letter_groups": (
        "jobs_job (domain, (last_error ->> 'class'), (last_error ->> 'http_status'), tenant_id, finished_at)"
        " WHERE status = 'failed'"
    ),
    "jobs_dead_letter_newest": "jobs_job (finished_at) WHERE status = 'failed'",
}


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("scheduling", "0001_initial"),
    ]

    operations = [
        migrations.RunSQL(
            sql=f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {definition}",
            reverse_sql=f"DROP INDEX CONCURRENTLY IF EXISTS {name}",
        )
        for name, definition in INDEXES.items()
    ]
