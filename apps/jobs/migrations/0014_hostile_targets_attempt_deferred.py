# The attempt outcome "deferred" (NFR-24): a choices change only, no change in the database.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("jobs", "0013_budget_admin_rare_indexes")]

    operations = [
        migrations.AlterField(
            model_name="attempt",
            name="outcome",
            field=models.CharField(
                blank=True,
                choices=[
                    ("succeeded", "Succeeded"),
                    ("failed_temporary", "Temporary"),
                    ("failed_permanent", "Permanent"),
                    ("cancelled", "Cancelled"),
                    ("lost", "Lost"),
                    ("deferred", "Deferred"),
                ],
                max_length=20,
                null=True,
            ),
        ),
    ]
