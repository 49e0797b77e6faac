"""The queued jobs' index carries ``render`` too, so that ``queue_snapshot`` (apps/jobs/rollups.py)
tells the browser component's dispatchable jobs from the plain workers' in the same index-only
pass (FR-30, docs/kubernetes.md). ``render`` is set at intake and never changes, so no update
that was HOT becomes non-HOT. Built CONCURRENTLY beside the old one, which is then dropped and
the new one takes its name.
"""

from django.db import migrations


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("jobs", "0011_browser_render")]

    operations = [
        migrations.RunSQL(
            sql=(
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_queued_backlog_render "
                "ON jobs_job (created_at) INCLUDE (tenant_id, priority, not_before, fetch_parked_at, render) "
                "WHERE status = 'queued'"
            ),
            reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS jobs_queued_backlog_render",
        ),
        migrations.RunSQL(
            sql="DROP INDEX CONCURRENTLY IF EXISTS jobs_queued_backlog",
            reverse_sql=(
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_queued_backlog "
                "ON jobs_job (created_at) INCLUDE (tenant_id, priority, not_before, fetch_parked_at) "
                "WHERE status = 'queued'"
            ),
        ),
        migrations.RunSQL(
            sql="ALTER INDEX jobs_queued_backlog_render RENAME TO jobs_queued_backlog",
            reverse_sql="ALTER INDEX jobs_queued_backlog RENAME TO jobs_queued_backlog_render",
        ),
    ]
