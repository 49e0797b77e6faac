"""Re-fetching (FR-33 to FR-35, docs/revalidation.md): a job's ``revalidate`` and ``callback_on``
switches, whether its body ``changed`` and its ``previous_job``, and an attempt's
``revalidated_from``.

Online-safe: nullable columns without a default are recorded in the catalogue only (no rewrite,
no scan). The index of the jobs that have a ``changed`` (GET /jobs?changed=) is built
CONCURRENTLY, so intake is never locked out: hence atomic = False. No existing row is in it.
"""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("jobs", "0020_fair_domain_turn"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="revalidate",
            field=models.BooleanField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="callback_on",
            field=models.CharField(blank=True, max_length=8, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="changed",
            field=models.BooleanField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="previous_job",
            field=models.UUIDField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="attempt",
            name="revalidated_from",
            field=models.UUIDField(blank=True, null=True),
        ),
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("changed__isnull", False)),
                fields=["tenant", "-id"],
                name="jobs_tenant_changed_newest",
            ),
        ),
    ]
