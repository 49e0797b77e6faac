# Two nullable columns without a default: a catalogue change only, no table rewrite, no long lock.
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("tenants", "0005_clients_webhook_secrets")]

    operations = [
        migrations.AddField(
            model_name="tenant",
            name="max_queued_jobs",
            field=models.PositiveIntegerField(
                blank=True,
                null=True,
                help_text="Queued jobs this tenant may have at once (a new job or batch past it is 429 "
                "tenant_backlog_full). Empty: the service's default; 0: no cap.",
            ),
        ),
        migrations.AddField(
            model_name="tenant",
            name="max_batches_in_progress",
            field=models.PositiveIntegerField(
                blank=True,
                null=True,
                help_text="Batches this tenant may have received but not yet loaded (another is 429 "
                "tenant_batches_full). Empty: the service's default; 0: no cap.",
            ),
        ),
    ]
