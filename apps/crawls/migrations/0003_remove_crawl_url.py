"""The single start URL is the crawl's first seed since 0002: its column goes (in its own
migration, after the data moved, so no ALTER TABLE runs with the data migration's updates)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("crawls", "0002_seeds_scopes_completed")]

    operations = [migrations.RemoveField(model_name="crawl", name="url")]
