"""Rendered jobs (FR-30, FR-32; docs/design/browser.md): the job's ``render`` and browser options,
and a rendered attempt's subrequest counts.

Online-safe: every column is nullable or has a database default, which PostgreSQL 11+ records
in the catalogue without rewriting the table; no CHECK constraint (a check on a new column makes
PostgreSQL scan the table under its lock), hence plain integers for the counts.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0010_deploy_queued_backlog"),
    ]

    operations = [
        migrations.AddField(
            model_name="attempt",
            name="subrequests_blocked",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="attempt",
            name="subrequests_made",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="browser_options",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="job",
            name="render",
            field=models.CharField(
                choices=[("none", "None"), ("browser", "Browser")],
                db_default="none",
                default="none",
                max_length=8,
            ),
        ),
    ]
