"""The ended crawls by ``finished_at``, for the rollup's count of ended crawls (FR-46,
apps/crawls/rollups.py ``crawls_ended_between``). Built CONCURRENTLY: crawls are never locked out."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("crawls", "0006_sitemaps"),
        ("tenants", "0007_tokens_scopes"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="crawl",
            index=models.Index(
                condition=models.Q(("finished_at__isnull", False)),
                fields=["finished_at"],
                name="crawls_finished",
            ),
        ),
    ]
