# ADD COLUMN ... DEFAULT 0 NOT NULL with a constant default: a catalogue change on PostgreSQL 11+
# (no table rewrite, the ACCESS EXCLUSIVE lock held for milliseconds); the default stays in the
# database (db_default) so that raw INSERTs (apps/jobs/bulk.py, intake) need not name the column.
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("jobs", "0016_clients_result_headers")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="version",
            field=models.BigIntegerField(db_default=0, editable=False),
        ),
    ]
