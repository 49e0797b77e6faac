"""The queued jobs' index widened for the scaling signal (FR-27, docs/kubernetes.md): the same
partial index as jobs_queued_by_created (0007: queued rows only, by created_at, carrying tenant and
priority) that also carries ``not_before`` and ``fetch_parked_at``, so that ``queue_snapshot``
(apps/jobs/rollups.py) tells the dispatchable jobs (due and not parked) from those waiting out a
retry backoff, a domain deferral or another job's fetch in the same index-only pass.

It replaces 0007's index rather than adding one: a job entering the queue still writes one entry
here, 16 bytes wider. ``not_before`` makes no update non-HOT that was HOT before (it is
jobs_outbox_due's key already). ``fetch_parked_at`` changes in writes that also change the status,
``published_at`` (jobs_published_untaken) or ``fetch_key`` (jobs_by_fetch_key), except one: a job
parked again on a retry with its key and publish stamp unchanged, a rare path that now writes
this index's entry too.

Raw SQL, built CONCURRENTLY (the new one first, so a scrape always has an index), like 0007.
"""

from django.db import migrations


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("jobs", "0009_admin_filter_indexes")]

    operations = [
        migrations.RunSQL(
            sql=(
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_queued_backlog "
                "ON jobs_job (created_at) INCLUDE (tenant_id, priority, not_before, fetch_parked_at) "
                "WHERE status = 'queued'"
            ),
            reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS jobs_queued_backlog",
        ),
        migrations.RunSQL(
            sql="DROP INDEX CONCURRENTLY IF EXISTS jobs_queued_by_created",
            reverse_sql=(
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_queued_by_created "
                "ON jobs_job (created_at) INCLUDE (tenant_id, priority) WHERE status = 'queued'"
            ),
        ),
    ]
