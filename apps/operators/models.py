"""Per-minute rollups of the ledger: what the dashboard charts and ``/metrics`` read,
so that neither ever scans jobs_job or jobs_attempt. The rollup task (apps/operators/rollup_runner.py)
writes them every minute; minute rows older than SCRAPEJOBS_ROLLUP_RETENTION_DAYS are pruned, the
running totals are kept (they are Prometheus counters and must never go down)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class AttemptMinute(models.Model):
    """Attempts that ended in one minute, by outcome and error class."""

    minute = models.DateTimeField()
    outcome = models.CharField(max_length=20)
    error_class = models.CharField(max_length=64, blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    dead_letters = models.PositiveIntegerField(default=0)  # attempts that ended their job as failed
    # Body bytes not transferred: the kept bodies of the attempts answered 304 (FR-35).
    bytes_kept = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["minute", "outcome", "error_class"], name="operators_attempt_minute_key"
            )
        ]


class DomainHour(models.Model):
    """Attempts that ended in one hour for one target domain, and how many of them failed. Hours,
    not minutes: a week of them stays small even with many domains."""

    hour = models.DateTimeField()
    domain = models.CharField(max_length=255)
    attempts = models.PositiveIntegerField(default=0)
    failures = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["hour", "domain"], name="operators_domain_hour_key")]


class FirstAttemptMinute(models.Model):
    """Time to first attempt of the jobs whose first attempt began in one minute: a histogram
    (one row per bucket, its upper bound ``le`` in seconds; the last one is +Inf)."""

    minute = models.DateTimeField()
    le = models.FloatField()
    count = models.PositiveIntegerField(default=0)
    sum_s = models.FloatField(default=0.0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["minute", "le"], name="operators_first_attempt_minute_key")
        ]


class GaugeMinute(models.Model):
    """What the queue and the writer looked like at one minute (the last reading in it)."""

    minute = models.DateTimeField(unique=True)
    queued = models.PositiveIntegerField(default=0)
    running = models.PositiveIntegerField(default=0)
    oldest_queued_age_s = models.FloatField(default=0.0)
    # The scaling signal (FR-27): of the queued jobs, those a worker could start now.
    dispatchable = models.PositiveIntegerField(default=0)
    oldest_dispatchable_age_s = models.FloatField(default=0.0)
    running_past_lease = models.PositiveIntegerField(default=0)
    # None: Redis did not answer, the writer's state is unknown for that minute.
    writer_lag_s = models.FloatField(null=True, blank=True)
    writer_dead_receipts = models.PositiveIntegerField(null=True, blank=True)


class QueueDepthMinute(models.Model):
    """Queued jobs per tenant and priority at one minute (pairs with none are not written)."""

    minute = models.DateTimeField()
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+", db_index=False)
    priority = models.CharField(max_length=8)
    depth = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["minute", "tenant", "priority"], name="operators_queue_depth_minute_key"
            )
        ]


class AttemptTotal(models.Model):
    """Every attempt ever rolled up, by outcome and error class: ``/metrics`` counters."""

    outcome = models.CharField(max_length=20)
    error_class = models.CharField(max_length=64, blank=True, default="")
    attempts = models.BigIntegerField(default=0)
    dead_letters = models.BigIntegerField(default=0)
    bytes_kept = models.BigIntegerField(default=0)  # as AttemptMinute's (FR-35)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["outcome", "error_class"], name="operators_attempt_total_key")
        ]


class DomainTotal(models.Model):
    """Every attempt rolled up, and its failures, by target domain: ``/metrics`` counters for the
    domains ``SCRAPEJOBS_METRICS_DOMAINS`` names. ``last_seen`` is the hour of its latest attempt:
    a domain not seen within SCRAPEJOBS_ROLLUP_RETENTION_DAYS loses its row (rollups_prune), so
    the table holds the domains fetched lately, not every host ever fetched."""

    domain = models.CharField(max_length=255, unique=True)
    attempts = models.BigIntegerField(default=0)
    failures = models.BigIntegerField(default=0)
    # Indexed for rollups_prune's range delete (apps/operators/rollup_runner.py).
    last_seen = models.DateTimeField(default=timezone.now, db_index=True)


class FirstAttemptTotal(models.Model):
    """The time-to-first-attempt histogram since the start, one row per bucket."""

    le = models.FloatField(unique=True)
    count = models.BigIntegerField(default=0)
    sum_s = models.FloatField(default=0.0)


class CrawlTotal(models.Model):
    """Every crawl that ended, by how it ended (completed, cancelled): ``/metrics`` counters
    (FR-46), folded in by the rollup task from the crawls' ``finished_at``."""

    status = models.CharField(max_length=16, unique=True)
    crawls = models.BigIntegerField(default=0)


class RollupState(models.Model):
    """One row: the id of the last attempt rolled up (every attempt up to it is counted), and
    the ``finished_at`` up to which ended crawls are counted."""

    attempt_id = models.BigIntegerField(default=0)
    crawls_upto = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)


class TenantUsageDay(models.Model):
    """One tenant's use of the service on one UTC day, by attempt outcome (FR-50, docs/usage.md):
    what GET /api/v1/usage reads. Written by the same fold as the minute rows, on the same attempt
    watermark; kept USAGE_RETENTION_DAYS (13 months), not the minute rows' week.

    ``attempts``, ``bytes_stored`` and ``rendered_pages`` count under the day the attempt ended;
    ``jobs_submitted`` counts each job once, at its first attempt, under the day it was submitted
    and the outcome of that first attempt (the sum over outcomes is the day's jobs)."""

    day = models.DateField()
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+", db_index=False)
    outcome = models.CharField(max_length=20)
    jobs_submitted = models.BigIntegerField(default=0)
    attempts = models.BigIntegerField(default=0)
    # Body bytes written to the result storage: succeeded attempts that fetched (not served
    # another job's fetch, not a 304 that kept the previous body).
    bytes_stored = models.BigIntegerField(default=0)
    # Succeeded attempts that fetched and rendered the page in a browser (FR-30).
    rendered_pages = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            # The fold's ON CONFLICT key; it also serves usage_days (apps/operators/usage.py): one
            # tenant's days in a range (tenant first).
            models.UniqueConstraint(
                fields=["tenant", "day", "outcome"], name="operators_tenant_usage_day_key"
            )
        ]
        indexes = [
            # rollups_prune (apps/operators/rollup_runner.py): days past the retention, all tenants.
            models.Index(fields=["day"], name="operators_usage_day"),
        ]
