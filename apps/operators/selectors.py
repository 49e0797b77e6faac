"""Reads of the rollup tables for tenants themselves: their daily usage (FR-49, docs/usage.md)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from django.db.models import Count
from django.db.models.functions import TruncDate

from apps.batches.models import Batch
from apps.crawls.models import Crawl
from apps.jobs.models import AttemptOutcome
from apps.operators.models import TenantUsageDay


@dataclass
class UsageDay:
    day: date
    jobs_submitted: int = 0
    # Every outcome is present, zero when none ended so.
    attempts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(AttemptOutcome.values, 0))
    bytes_stored: int = 0
    rendered_pages: int = 0
    batches: int = 0
    crawls: int = 0

    def add(self, other: UsageDay) -> None:
        self.jobs_submitted += other.jobs_submitted
        for outcome, n in other.attempts.items():
            self.attempts[outcome] = self.attempts.get(outcome, 0) + n
        self.bytes_stored += other.bytes_stored
        self.rendered_pages += other.rendered_pages
        self.batches += other.batches
        self.crawls += other.crawls


def usage_days(*, tenant_id: uuid.UUID, first: date, last: date) -> list[UsageDay]:
    """One entry per UTC day from ``first`` to ``last`` (days with nothing are zeros), from the
    rollup's per-tenant rows (one index range: operators_tenant_usage_day_key) and the tenant's
    batches and crawls; never the ledger. Attempts not yet rolled up (up to a rollup interval
    plus a settle time behind) are not in it yet."""
    days = {
        first + timedelta(days=i): UsageDay(first + timedelta(days=i)) for i in range((last - first).days + 1)
    }
    rows = TenantUsageDay.objects.filter(tenant_id=tenant_id, day__gte=first, day__lte=last).values_list(
        "day", "outcome", "jobs_submitted", "attempts", "bytes_stored", "rendered_pages"
    )
    for day, outcome, jobs, attempts, stored, rendered in rows:
        entry = days[day]
        entry.jobs_submitted += jobs
        entry.attempts[outcome] = entry.attempts.get(outcome, 0) + attempts
        entry.bytes_stored += stored
        entry.rendered_pages += rendered
    for day, n in _created_by_day(Batch, tenant_id=tenant_id, first=first, last=last).items():
        days[day].batches = n
    for day, n in _created_by_day(Crawl, tenant_id=tenant_id, first=first, last=last).items():
        days[day].crawls = n
    return list(days.values())


def _created_by_day(
    model: type[Batch] | type[Crawl], *, tenant_id: uuid.UUID, first: date, last: date
) -> dict[date, int]:
    """How many of the tenant's batches or crawls were created on each UTC day from ``first`` to
    ``last`` (FR-49): through the tenant's index, so bounded by that tenant's rows, never the
    ledger."""
    start = datetime.combine(first, time.min, tzinfo=UTC)
    end = datetime.combine(last + timedelta(days=1), time.min, tzinfo=UTC)
    rows = (
        model.objects.filter(tenant_id=tenant_id, created_at__gte=start, created_at__lt=end)
        .annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(n=Count("id"))
    )
    return {r["day"]: r["n"] for r in rows}
