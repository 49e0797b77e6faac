"""One trace per job (FR-29, docs/tracing.md): the trace context kept with a job.

Online-safe: a nullable column without a default is recorded in the catalogue only (no rewrite,
no scan), under a lock held for that instant.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0017_hostile_ledger_job_version"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="trace_context",
            field=models.TextField(blank=True, null=True),
        ),
    ]
