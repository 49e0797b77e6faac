"""Expiring idempotency keys (NFR-7).

``jobs_idempotency_by_created`` (created_at) WHERE idempotency_key IS NOT NULL serves
``idempotency_keys_expire`` (apps/jobs/intake.py), the hourly clean-up that releases keys older
than ``SCRAPEJOBS_IDEMPOTENCY_TTL_HOURS``. Partial: a job without a key (most of them) has no
entry, and a released key leaves the index, so it holds about one TTL's worth of keyed jobs.

Built with ``CREATE INDEX CONCURRENTLY`` (no lock against intake and the writer while it runs),
hence ``atomic = False``.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0002_writer_indexes"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("idempotency_key__isnull", False)),
                fields=["created_at"],
                name="jobs_idempotency_by_created",
            ),
        ),
    ]
