"""The queued jobs, oldest first, carrying tenant and priority: the operators' reads of
the backlog (apps/jobs/rollups.py, ``queue_snapshot``) - age of the oldest queued job, queue depth
per tenant and priority - are one index-only scan of the queued jobs instead of a pass over the
whole ledger. Only queued rows are in it, so it costs a write only when a job enters the queue.

Raw SQL, so the jobs model state is untouched (``makemigrations jobs`` sees no change); built
CONCURRENTLY so a live jobs table is not locked against intake while it builds.
"""

from django.db import migrations


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("jobs", "0006_bulk_batch_columns")]

    operations = [
        migrations.RunSQL(
            sql=(
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_queued_by_created "
                "ON jobs_job (created_at) INCLUDE (tenant_id, priority) WHERE status = 'queued'"
            ),
            reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS jobs_queued_by_created",
        ),
    ]
