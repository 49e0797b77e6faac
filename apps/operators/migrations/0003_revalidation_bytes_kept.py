"""Bytes not transferred thanks to 304s (FR-35, docs/revalidation.md): a running total per minute
and overall, beside the attempt counts. A constant default: a catalogue change, no rewrite."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("operators", "0002_deploy_dispatchable"),
    ]

    operations = [
        migrations.AddField(
            model_name="attemptminute",
            name="bytes_kept",
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="attempttotal",
            name="bytes_kept",
            field=models.BigIntegerField(default=0),
        ),
    ]
