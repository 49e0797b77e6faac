"""The dispatcher's two indexes lead with ``render`` (NFR-31, docs/design/browser.md).

Rendered jobs have their own queue (``jobs.browser``) and their own share of the broker, so the
publisher plans each render apart: every outbox query gains ``render = %s``. With ``render`` as
the leading column of jobs_outbox_fair and jobs_outbox_due, that is one more equality in front
of the same index walks (the existence probes, the tenant walk and the oldest rows stay index
probes), and a job still has one entry in each: plain jobs pay nothing for rendering existing.

Built CONCURRENTLY under temporary names, the old ones dropped CONCURRENTLY, then renamed (a
catalogue change), so intake is never locked out while the indexes build.
"""

from django.db import migrations

_WHERE = "WHERE status = 'queued' AND published_at IS NULL"


def _swap(name: str, columns: str, old_columns: str) -> list[migrations.RunSQL]:
    """Replace index ``name`` by one on ``columns``; reversed, the old one on ``old_columns``
    comes back the same way."""
    return [
        migrations.RunSQL(
            sql=f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name}_next ON jobs_job ({columns}) {_WHERE}",
            reverse_sql=f"DROP INDEX CONCURRENTLY IF EXISTS {name}_next",
        ),
        migrations.RunSQL(
            sql=f"DROP INDEX CONCURRENTLY IF EXISTS {name}",
            reverse_sql=f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON jobs_job ({old_columns}) {_WHERE}",
        ),
        migrations.RunSQL(
            sql=f"ALTER INDEX {name}_next RENAME TO {name}",
            reverse_sql=f"ALTER INDEX {name} RENAME TO {name}_next",
        ),
    ]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("publishing", "0002_fair_outbox_due_index"), ("jobs", "0011_browser_render")]

    operations = [
        *_swap(
            "jobs_outbox_fair", "render, priority, tenant_id, created_at", "priority, tenant_id, created_at"
        ),
        *_swap(
            "jobs_outbox_due",
            "render, priority, tenant_id, not_before NULLS FIRST",
            "priority, tenant_id, not_before NULLS FIRST",
        ),
    ]
