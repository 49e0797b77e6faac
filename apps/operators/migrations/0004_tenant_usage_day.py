"""Per-tenant daily usage (FR-49, docs/usage.md): a new table, filled by the rollup from the
attempts it folds after this is deployed (usage before that does not exist)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("operators", "0003_revalidation_bytes_kept"),
        ("tenants", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="TenantUsageDay",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("day", models.DateField()),
                ("outcome", models.CharField(max_length=20)),
                ("jobs_submitted", models.BigIntegerField(default=0)),
                ("attempts", models.BigIntegerField(default=0)),
                ("bytes_stored", models.BigIntegerField(default=0)),
                ("rendered_pages", models.BigIntegerField(default=0)),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="tenants.tenant",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tenant", "day", "outcome"), name="operators_tenant_usage_day_key"
                    )
                ],
                "indexes": [models.Index(fields=["day"], name="operators_usage_day")],
            },
        ),
    ]
