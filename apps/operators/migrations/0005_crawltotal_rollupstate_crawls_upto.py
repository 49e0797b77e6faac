"""Ended crawls by status, counted by the rollup task for /metrics (FR-46), and its watermark."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("operators", "0004_tenant_usage_day"),
    ]

    operations = [
        migrations.CreateModel(
            name="CrawlTotal",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("status", models.CharField(max_length=16, unique=True)),
                ("crawls", models.BigIntegerField(default=0)),
            ],
        ),
        migrations.AddField(
            model_name="rollupstate",
            name="crawls_upto",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
