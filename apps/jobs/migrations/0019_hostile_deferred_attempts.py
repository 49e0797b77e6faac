# A deferred attempt (NFR-24) is not counted toward max_attempts: the job keeps the number of its
# deferred attempts, and the limit check becomes attempts <= max_attempts + deferred_attempts.
#
# ADD COLUMN ... DEFAULT 0 NOT NULL with a constant default is a catalogue change (no rewrite).
# The new check is added NOT VALID (no scan under the ACCESS EXCLUSIVE lock), the old one dropped,
# then validated in a transaction of its own, which scans the table under a SHARE UPDATE
# EXCLUSIVE lock only (claims and the writer go on meanwhile): hence atomic = False. Rows the old
# fold wrote (max_attempts raised by one per deferral, deferred_attempts 0) satisfy it.
from django.db import migrations, models
from django.db.models import F, Q


class Migration(migrations.Migration):
    atomic = False

    dependencies = [("jobs", "0018_tracing_trace_context")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="deferred_attempts",
            field=models.PositiveSmallIntegerField(db_default=0, editable=False),
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    "ALTER TABLE jobs_job ADD CONSTRAINT jobs_attempts_within_budget"
                    " CHECK (attempts <= max_attempts + deferred_attempts) NOT VALID",
                    "ALTER TABLE jobs_job DROP CONSTRAINT jobs_attempts_within_budget",
                ),
                migrations.RunSQL(
                    "ALTER TABLE jobs_job DROP CONSTRAINT jobs_attempts_within_limit",
                    "ALTER TABLE jobs_job ADD CONSTRAINT jobs_attempts_within_limit"
                    " CHECK (attempts <= max_attempts)",
                ),
                migrations.RunSQL(
                    "ALTER TABLE jobs_job VALIDATE CONSTRAINT jobs_attempts_within_budget",
                    migrations.RunSQL.noop,
                ),
            ],
            state_operations=[
                migrations.RemoveConstraint(model_name="job", name="jobs_attempts_within_limit"),
                migrations.AddConstraint(
                    model_name="job",
                    constraint=models.CheckConstraint(
                        condition=Q(attempts__lte=F("max_attempts") + F("deferred_attempts")),
                        name="jobs_attempts_within_budget",
                    ),
                ),
            ],
        ),
    ]
