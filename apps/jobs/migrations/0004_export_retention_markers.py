"""Retention markers and the indexes of retention and exports.

- ``jobs_job.result_deleted_at`` and ``jobs_attempt.body_deleted_at``: when retention deleted the
  stored object (apps/jobs/retention.py), so nothing is deleted twice. Nullable without a
  default: adding them rewrites nothing, and the previous release keeps working.
- ``jobs_result_unexpired`` (result_stored_at) WHERE a result is stored and not deleted:
  ``results_due_for_expiry``. A deleted result leaves the index.
- ``jobs_final_by_finished`` (finished_at, id) WHERE the job is final: the export's keyset walk
  (``export_jobs_page``, apps/jobs/export_reads.py) and ``jobs_prune``.
- ``attempts_orphan_body`` (finished_at) WHERE the attempt may have left an orphan body and it
  is not deleted: ``orphan_bodies_due``. Lost and storage-failed attempts only, a small share.

Indexes are built with ``CREATE INDEX CONCURRENTLY`` (no lock against intake and the writer while
they run), hence ``atomic = False``.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0003_idempotency_expiry_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="attempt",
            name="body_deleted_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="result_deleted_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        AddIndexConcurrently(
            model_name="attempt",
            index=models.Index(
                condition=models.Q(
                    ("body_deleted_at__isnull", True),
                    models.Q(
                        ("outcome", "lost"),
                        ("error_class__in", ["storage_error", "internal_error"]),
                        _connector="OR",
                    ),
                ),
                fields=["finished_at"],
                name="attempts_orphan_body",
            ),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("result_deleted_at__isnull", True), ("result_key__isnull", False)),
                fields=["result_stored_at"],
                name="jobs_result_unexpired",
            ),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("status__in", ["succeeded", "failed", "cancelled"])),
                fields=["finished_at", "id"],
                name="jobs_final_by_finished",
            ),
        ),
    ]
