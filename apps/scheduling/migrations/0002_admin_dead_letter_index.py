"""The index behind the dead-letter pages (apps/scheduling/admin.py, selectors.py).

A dead letter is a failed job. The one-by-one list is newest failure first, and the grouped page
counts the newest ``GROUP_WINDOW`` dead letters: it finds where that window starts by walking
this index (``dead_letters_window_start``; id and attempts are included for the check against
discarded ones) and groups the rows of the window, read by a range scan of the same index.
Grouping every failed job instead took seconds at a million jobs (bench/admin.py).

Raw SQL on jobs_job (like apps/publishing's outbox index), so the jobs model state is untouched;
built CONCURRENTLY so a live ledger is not locked.
"""

from django.db import migrations

INDEXES = {
    "jobs_dead_letter_newest": "jobs_job (finished_at) INCLUDE (id, attempts) WHERE status = 'failed'",
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
