"""The index of the fair dispatcher's tenant walk (apps/jobs/outbox.py ``_SELECT_TENANTS``).

The walk lists only tenants with DUE unpublished rows: a tenant whose rows all wait (a domain
deferral, a retry backoff) must not be planned, or it costs its priority the round. Ordered by
(priority, tenant_id, not_before NULLS FIRST), the first entry of each tenant is its earliest
not_before, so "does this tenant have a due row" is one index probe, however many of its rows
wait. jobs_outbox_fair (created_at order) still serves the oldest due rows of each tenant.

Raw SQL, built CONCURRENTLY, like 0001.
"""

from django.db import migrations


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("publishing", "0001_outbox_fair_index")]

    operations = [
        migrations.RunSQL(
            sql=(
                "CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_outbox_due "
                "ON jobs_job (priority, tenant_id, not_before NULLS FIRST) "
                "WHERE status = 'queued' AND published_at IS NULL"
            ),
            reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS jobs_outbox_due",
        ),
    ]
