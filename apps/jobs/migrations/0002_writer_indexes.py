"""Fewer index writes per receipt the writer applies (NFR-W1).

A receipt moves its job (the status changes, so the row is rewritten with an entry in every
index of ``jobs_job``: never a HOT update) and closes its attempt. A profile of the writer's
PostgreSQL backend put most of its time in B-tree inserts, so this drops the indexes no query
needs and lets the attempt's close be a HOT update:

Dropped (each was written on every receipt):
- ``jobs_job_tenant_id_47fdbf2d`` (tenant_id), Django's automatic foreign-key index:
  ``jobs_tenant_newest`` (tenant_id, id DESC) serves every lookup by tenant (``job_list``,
  ``job_get``, the PROTECT check when a tenant is deleted).
- ``jobs_job_domain_3f0e0f84_like`` (domain varchar_pattern_ops): only for LIKE 'prefix%', which
  no query runs (the admins' searches are icontains, which it cannot serve). The plain domain
  index stays, under its old name.
- ``jobs_outbox_unpublished`` (not_before, created_at) WHERE queued AND unpublished: the
  publisher's queries moved to ``jobs_outbox_fair`` (apps/publishing/migrations/0001), which has
  the same predicate.
- ``jobs_attempt_job_id_b587cf59`` (job_id), Django's automatic foreign-key index:
  ``attempts_unique_job_number`` (job_id, number) serves every lookup by job (the attempts of a
  job, the writer's and the sweeper's close of one attempt, the cascade when a job is deleted).

``jobs_attempt`` gets fillfactor 50: an attempt row is written open by ``job_claim`` and
rewritten once, closed (and longer), by the writer or the sweeper, without touching an indexed
column, so with room left on its page the close is a HOT update (no index entry at all). In the
writer benchmark 82% of the closes were HOT at 50 (44% at 70, 27% at 85, 22% at the default
100), and the table ended about the same size: a close that is not HOT leaves its dead row
behind anyway. Rows already written keep their pages as they are; new pages get the room.

What stays on ``jobs_job``, and who reads it:
- ``jobs_job_pkey`` (id): every lookup by id (claims, the writer, the API).
- ``jobs_job_domain_3f0e0f84`` (domain): the admin's domain filter (apps/jobs/admin.py), a
  dead-letter group's jobs (apps/scheduling/selectors.py ``dead_letters_in_group``).
- ``jobs_tenant_newest`` (tenant_id, id DESC): ``job_list`` without a filter, lookups by tenant.
- ``jobs_tenant_status_newest`` (tenant_id, status, id DESC): ``job_list`` by status.
- ``jobs_tenant_priority_newest`` (tenant_id, priority, id DESC): ``job_list`` by priority.
- ``jobs_unique_idempotency_key_per_tenant``: ``job_create``'s idempotency (a constraint).
- ``jobs_running_by_lease`` (partial): ``jobs_sweep_expired_leases``.
- ``jobs_published_untaken`` (partial): ``jobs_sweep_unclaimed``.
- ``jobs_final_unannounced`` (partial): ``webhooks_enqueue_final``.
- ``jobs_outbox_fair`` (partial, apps/publishing): ``outbox_publish_batch``.

Each drop is ``DROP INDEX CONCURRENTLY`` (no lock against intake and the writer while it runs),
hence ``atomic = False``; the model state follows with state-only operations.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0001_initial"),
        ("publishing", "0001_outbox_fair_index"),  # jobs_outbox_fair replaces jobs_outbox_unpublished
        ("tenants", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    "DROP INDEX CONCURRENTLY IF EXISTS jobs_job_tenant_id_47fdbf2d",
                    reverse_sql="CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_job_tenant_id_47fdbf2d"
                    " ON jobs_job (tenant_id)",
                ),
                migrations.RunSQL(
                    "DROP INDEX CONCURRENTLY IF EXISTS jobs_job_domain_3f0e0f84_like",
                    reverse_sql="CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_job_domain_3f0e0f84_like"
                    " ON jobs_job (domain varchar_pattern_ops)",
                ),
                migrations.RunSQL(
                    "DROP INDEX CONCURRENTLY IF EXISTS jobs_outbox_unpublished",
                    reverse_sql="CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_outbox_unpublished"
                    " ON jobs_job (not_before, created_at) WHERE status = 'queued' AND published_at IS NULL",
                ),
                migrations.RunSQL(
                    "DROP INDEX CONCURRENTLY IF EXISTS jobs_attempt_job_id_b587cf59",
                    reverse_sql="CREATE INDEX CONCURRENTLY IF NOT EXISTS jobs_attempt_job_id_b587cf59"
                    " ON jobs_attempt (job_id)",
                ),
                migrations.RunSQL(
                    "ALTER TABLE jobs_attempt SET (fillfactor = 50)",
                    reverse_sql="ALTER TABLE jobs_attempt RESET (fillfactor)",
                ),
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="job",
                    name="tenant",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="jobs",
                        to="tenants.tenant",
                    ),
                ),
                migrations.AlterField(
                    model_name="job",
                    name="domain",
                    field=models.CharField(max_length=255),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(fields=["domain"], name="jobs_job_domain_3f0e0f84"),
                ),
                migrations.RemoveIndex(model_name="job", name="jobs_outbox_unpublished"),
                migrations.AlterField(
                    model_name="attempt",
                    name="job",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="attempt_set",
                        to="jobs.job",
                    ),
                ),
            ],
        ),
    ]
