"""The admin's status and priority filters served by partial indexes of the rare values (NFR-15).

Every row version of a job entered jobs_admin_status_newest (status, id) and
jobs_admin_priority_newest (priority, id): four versions per job, eight index entries, for two
filters only operators use. The common values need no index: ``?status__exact=succeeded`` and
``?priority__exact=normal`` newest first find their page on the primary key within the first
rows they read, as the unfiltered list does. So only the rare values are indexed: a job's final
succeeded version no longer enters the status index, and a normal-priority job never enters the
priority one (bench/admin.py times every value of both filters at a million jobs).

The new indexes are built CONCURRENTLY before the old ones are dropped CONCURRENTLY: the filters
keep an index throughout and intake is never locked out.
"""

from django.db import migrations

REPLACED = {
    # JobAdmin: ?status__exact=queued / running / failed / cancelled, newest first.
    "jobs_admin_status_newest": (
        "jobs_admin_rare_status_newest",
        "jobs_job (status, id) WHERE status <> 'succeeded'",
        "jobs_job (status, id)",
    ),
    # JobAdmin: ?priority__exact=high / low, newest first.
    "jobs_admin_priority_newest": (
        "jobs_admin_rare_priority_newest",
        "jobs_job (priority, id) WHERE priority <> 'normal'",
        "jobs_job (priority, id)",
    ),
}


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0012_queued_backlog_render"),
    ]

    operations = [
        op
        for old, (new, definition, old_definition) in REPLACED.items()
        for op in (
            migrations.RunSQL(
                sql=f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {new} ON {definition}",
                reverse_sql=f"DROP INDEX CONCURRENTLY IF EXISTS {new}",
            ),
            migrations.RunSQL(
                sql=f"DROP INDEX CONCURRENTLY IF EXISTS {old}",
                reverse_sql=f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {old} ON {old_definition}",
            ),
        )
    ]
