"""Indexes for the admin's list filters (apps/jobs/admin.py): each answers "this value,
newest first, 50 rows" from the index instead of walking the primary key past every other row
(a rare status or error class among a million jobs or three million attempts is a scan).

Existing indexes serve the other filters: tenant (jobs_tenant_newest), domain
(jobs_job_domain_3f0e0f84), an attempt's job (attempts_unique_job_number). Each index here is paid
by every write that moves a job or records an attempt; these are the ones the admin's filters
cannot do without (bench/admin.py measures the pages with and without a filter).

Raw SQL, so the models' state is untouched; built CONCURRENTLY so a live ledger is not locked.
"""

from django.db import migrations

INDEXES = {
    # JobAdmin: ?status__exact=... (a rare state: running, cancelled) newest first.
    "jobs_admin_status_newest": "jobs_job (status, id)",
    # JobAdmin: ?priority__exact=... newest first.
    "jobs_admin_priority_newest": "jobs_job (priority, id)",
    # AttemptAdmin: ?outcome__exact=... newest first.
    "attempts_admin_outcome_newest": "jobs_attempt (outcome, id)",
    # AttemptAdmin: ?error_class=... newest first; attempts without an error are most of them.
    "attempts_admin_error_class_newest": "jobs_attempt (error_class, id) WHERE error_class IS NOT NULL",
}


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0008_sf_single_flight"),
    ]

    operations = [
        migrations.RunSQL(
            sql=f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {definition}",
            reverse_sql=f"DROP INDEX CONCURRENTLY IF EXISTS {name}",
        )
        for name, definition in INDEXES.items()
    ]
