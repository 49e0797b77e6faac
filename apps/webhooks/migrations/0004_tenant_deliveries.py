"""Every webhook delivery carries its tenant, a job's too, and a tenant's deliveries are indexed
newest first for its delivery log (FR-38, ``GET /webhook-deliveries``).

The backfill gives existing job deliveries their job's tenant (one statement; a delivery table is
as large as the jobs with a callback_url that its retention keeps). The index is built
CONCURRENTLY so that deliveries keep being written meanwhile, hence ``atomic = False``."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0019_hostile_deferred_attempts"),
        ("tenants", "0007_tokens_scopes"),
        ("webhooks", "0003_batch_callbacks"),
    ]

    operations = [
        migrations.RunSQL(
            """
            UPDATE webhooks_webhookdelivery AS d SET tenant_id = j.tenant_id
              FROM jobs_job AS j
             WHERE d.job_id = j.id AND d.tenant_id IS NULL
            """,
            migrations.RunSQL.noop,
        ),
        AddIndexConcurrently(
            model_name="webhookdelivery",
            index=models.Index(fields=["tenant", "-id"], name="webhooks_by_tenant"),
        ),
    ]
