"""The rollup task's work (beat, every SCRAPEJOBS_ROLLUP_INTERVAL_S): fold newly ended attempts
into per-minute and running totals, record the queue and the writer as they are now, prune minute
rows past SCRAPEJOBS_ROLLUP_RETENTION_DAYS. The dashboard and ``/metrics`` read only these tables
and bounded queries, so their cost does not grow with the ledger."""

from __future__ import annotations

import bisect
import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

import redis
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from apps.crawls.rollups import crawls_ended_between
from apps.jobs.models import AttemptOutcome
from apps.jobs.rollups import (
    AttemptGroup,
    FirstAttemptWait,
    QueueSnapshot,
    TenantUsageGroup,
    attempt_groups,
    attempts_settled_upto,
    first_attempt_waits,
    queue_snapshot,
    tenant_usage_groups,
)
from apps.operators.models import (
    AttemptMinute,
    DomainHour,
    DomainTotal,
    FirstAttemptMinute,
    GaugeMinute,
    QueueDepthMinute,
    RollupState,
    TenantUsageDay,
)
from apps.writer.selectors import writer_status

log = logging.getLogger(__name__)

# Upper bounds (seconds) of the time-to-first-attempt histogram; the SLO's 60 s is one of them.
FIRST_ATTEMPT_BUCKETS: tuple[float, ...] = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, float("inf"))
FAILED_OUTCOMES = frozenset({AttemptOutcome.TEMPORARY, AttemptOutcome.PERMANENT, AttemptOutcome.LOST})
# Attempts folded per transaction, and transactions per run: a run that catches up on a large
# backlog (a first run on an old ledger) stops after this many and goes on at the next run.
BATCH_ATTEMPTS = 10_000
MAX_BATCHES_PER_RUN = 50
# An attempt id handed out this long ago belongs to a committed claim (apps/jobs/rollups.py).
SETTLE_S = 30.0
# A tenant's daily usage rows are kept 13 months (FR-49, docs/usage.md): a year back from any day
# of the current month.
USAGE_RETENTION_DAYS = 397


def rollup_run(
    *, batch: int = BATCH_ATTEMPTS, max_batches: int = MAX_BATCHES_PER_RUN, settle_s: float = SETTLE_S
) -> int:
    """One run of the rollup task; returns how many ended attempts it folded in."""
    folded = 0
    for _ in range(max_batches):
        moved, attempts = _fold_batch(batch, settle_s)
        folded += attempts
        if moved < batch:
            break
    crawls_fold(settle_s=settle_s)
    gauges_record()
    rollups_prune()
    # The dashboard tells a stalled rollup by this stamp, so it moves even when nothing ended.
    RollupState.objects.filter(pk=1).update(updated_at=timezone.now())
    return folded


def _fold_batch(batch: int, settle_s: float) -> tuple[int, int]:
    """Fold the next settled attempts into the rollups and move the watermark, in one transaction:
    the row lock on the watermark makes two overlapping runs take turns, never count twice.
    Returns (ids moved over, ended attempts folded)."""
    RollupState.objects.get_or_create(pk=1)
    with transaction.atomic():
        state = RollupState.objects.select_for_update().get(pk=1)
        after = state.attempt_id
        upto = attempts_settled_upto(after_id=after, limit=batch, settle_s=settle_s)
        if upto <= after:
            return 0, 0
        groups = attempt_groups(after_id=after, upto_id=upto)
        _add_attempt_groups(groups)
        _add_first_attempt_waits(first_attempt_waits(after_id=after, upto_id=upto))
        _add_tenant_usage(tenant_usage_groups(after_id=after, upto_id=upto))
        state.attempt_id = upto
        state.save(update_fields=["attempt_id", "updated_at"])
    return upto - after, sum(g.attempts for g in groups)


def _upsert_adding(
    table: str, key: Sequence[str], values: Sequence[str], rows: Iterable[tuple], latest: Sequence[str] = ()
) -> None:
    """INSERT rows, or add their values to the row already there (rollups only ever grow); the
    ``latest`` columns (after ``values`` in a row) keep the greater of the two."""
    rows = list(rows)
    if not rows:
        return
    columns = [*key, *values, *latest]
    sql = (
        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))}) "
        f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET "
        + ", ".join(
            [f"{v} = {table}.{v} + EXCLUDED.{v}" for v in values]
            + [f"{c} = GREATEST({table}.{c}, EXCLUDED.{c})" for c in latest]
        )
    )
    with connection.cursor() as cur:
        cur.executemany(sql, rows)


def _add_attempt_groups(groups: list[AttemptGroup]) -> None:
    by_minute: Counter[tuple[datetime, str, str]] = Counter()
    dead_by_minute: Counter[tuple[datetime, str, str]] = Counter()
    kept_by_minute: Counter[tuple[datetime, str, str]] = Counter()
    by_hour: Counter[tuple[datetime, str]] = Counter()
    failed_by_hour: Counter[tuple[datetime, str]] = Counter()
    for g in groups:
        key = (g.minute, g.outcome, g.error_class)
        by_minute[key] += g.attempts
        dead_by_minute[key] += g.dead_letters
        kept_by_minute[key] += g.bytes_kept
        hour_key = (g.minute.replace(minute=0), g.domain)
        by_hour[hour_key] += g.attempts
        if g.outcome in FAILED_OUTCOMES:
            failed_by_hour[hour_key] += g.attempts
    totals: Counter[tuple[str, str]] = Counter()
    dead_totals: Counter[tuple[str, str]] = Counter()
    kept_totals: Counter[tuple[str, str]] = Counter()
    for (_, outcome, error_class), n in by_minute.items():
        totals[(outcome, error_class)] += n
        dead_totals[(outcome, error_class)] += dead_by_minute[(_, outcome, error_class)]
        kept_totals[(outcome, error_class)] += kept_by_minute[(_, outcome, error_class)]
    domain_totals: Counter[str] = Counter()
    domain_failures: Counter[str] = Counter()
    domain_seen: dict[str, datetime] = {}
    for (hour, domain), n in by_hour.items():
        domain_totals[domain] += n
        domain_failures[domain] += failed_by_hour[(hour, domain)]
        domain_seen[domain] = max(hour, domain_seen.get(domain, hour))
    _upsert_adding(
        "operators_attemptminute",
        ("minute", "outcome", "error_class"),
        ("attempts", "dead_letters", "bytes_kept"),
        ((*k, n, dead_by_minute[k], kept_by_minute[k]) for k, n in by_minute.items()),
    )
    _upsert_adding(
        "operators_domainhour",
        ("hour", "domain"),
        ("attempts", "failures"),
        ((*k, n, failed_by_hour[k]) for k, n in by_hour.items()),
    )
    _upsert_adding(
        "operators_attempttotal",
        ("outcome", "error_class"),
        ("attempts", "dead_letters", "bytes_kept"),
        ((*k, n, dead_totals[k], kept_totals[k]) for k, n in totals.items()),
    )
    _upsert_adding(
        "operators_domaintotal",
        ("domain",),
        ("attempts", "failures"),
        ((d, n, domain_failures[d], domain_seen[d]) for d, n in domain_totals.items()),
        latest=("last_seen",),
    )


def _add_tenant_usage(groups: list[TenantUsageGroup]) -> None:
    _upsert_adding(
        "operators_tenantusageday",
        ("tenant_id", "day", "outcome"),
        ("jobs_submitted", "attempts", "bytes_stored", "rendered_pages"),
        (
            (g.tenant_id, g.day, g.outcome, g.jobs_submitted, g.attempts, g.bytes_stored, g.rendered_pages)
            for g in groups
        ),
    )


def crawls_fold(*, settle_s: float = SETTLE_S, now: datetime | None = None) -> int:
    """Count the crawls that ended since the last run into CrawlTotal (FR-46) and move the
    watermark, in one transaction under the state row's lock (two runs take turns, never count
    twice). A crawl's ``finished_at`` is stamped in the transaction that ends it; only those older
    than ``settle_s`` are taken, so one whose transaction commits late is counted at a later run."""
    upto = (now or timezone.now()) - timedelta(seconds=settle_s)
    RollupState.objects.get_or_create(pk=1)
    with transaction.atomic():
        state = RollupState.objects.select_for_update().get(pk=1)
        if state.crawls_upto is not None and state.crawls_upto >= upto:
            return 0
        ended = crawls_ended_between(after=state.crawls_upto, upto=upto)
        _upsert_adding("operators_crawltotal", ("status",), ("crawls",), ended.items())
        state.crawls_upto = upto
        state.save(update_fields=["crawls_upto", "updated_at"])
    return sum(ended.values())


def first_attempt_bucket(wait_s: float) -> float:
    """The histogram bucket (its upper bound) a wait falls in: the first bound >= the wait."""
    return FIRST_ATTEMPT_BUCKETS[bisect.bisect_left(FIRST_ATTEMPT_BUCKETS, wait_s)]


def _add_first_attempt_waits(waits: list[FirstAttemptWait]) -> None:
    counts: Counter[tuple[datetime, float]] = Counter()
    sums: defaultdict[tuple[datetime, float], float] = defaultdict(float)
    for w in waits:
        key = (w.minute, first_attempt_bucket(w.wait_s))
        counts[key] += 1
        sums[key] += w.wait_s
    total_counts: Counter[float] = Counter()
    total_sums: defaultdict[float, float] = defaultdict(float)
    for (_, le), n in counts.items():
        total_counts[le] += n
        total_sums[le] += sums[(_, le)]
    _upsert_adding(
        "operators_firstattemptminute",
        ("minute", "le"),
        ("count", "sum_s"),
        ((*k, n, sums[k]) for k, n in counts.items()),
    )
    _upsert_adding(
        "operators_firstattempttotal",
        ("le",),
        ("count", "sum_s"),
        ((le, n, total_sums[le]) for le, n in total_counts.items()),
    )


def writer_reading() -> tuple[float | None, int | None]:
    """(writer lag in seconds, writer dead receipts), or (None, None) when Redis does not answer."""
    try:
        status = writer_status()
    except redis.RedisError as exc:
        log.warning("writer status unavailable for the rollup: %s", exc)
        return None, None
    return status.lag_ms / 1000, status.dead_receipts


def gauges_record(*, now: datetime | None = None) -> QueueSnapshot:
    """Write this minute's reading of the queue and the writer (the last run in a minute wins)."""
    minute = (now or timezone.now()).replace(second=0, microsecond=0)
    snapshot = queue_snapshot()
    lag_s, dead = writer_reading()
    with transaction.atomic():
        GaugeMinute.objects.update_or_create(
            minute=minute,
            defaults={
                "queued": snapshot.queued,
                "running": snapshot.running,
                "oldest_queued_age_s": snapshot.oldest_queued_age_s,
                "dispatchable": sum(d.dispatchable for d in snapshot.depths),
                "oldest_dispatchable_age_s": snapshot.oldest_dispatchable_age_s,
                "running_past_lease": snapshot.running_past_lease,
                "writer_lag_s": lag_s,
                "writer_dead_receipts": dead,
            },
        )
        QueueDepthMinute.objects.filter(minute=minute).delete()
        QueueDepthMinute.objects.bulk_create(
            QueueDepthMinute(minute=minute, tenant_id=d.tenant_id, priority=d.priority, depth=d.depth)
            for d in snapshot.depths
        )
    return snapshot


def rollups_prune(*, now: datetime | None = None) -> int:
    """Delete minute and hour rows older than the retention, the per-domain totals of domains not
    seen within it, and tenants' usage days older than USAGE_RETENTION_DAYS (the other totals
    stay). A domain ``SCRAPEJOBS_METRICS_DOMAINS`` names keeps its row: its ``/metrics`` counters
    must never start again from 0."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.SCRAPEJOBS_ROLLUP_RETENTION_DAYS)
    deleted = (
        DomainTotal.objects.filter(last_seen__lt=cutoff)
        .exclude(domain__in=settings.SCRAPEJOBS_METRICS_DOMAINS)
        .delete()[0]
    )
    for model, column in (
        (AttemptMinute, "minute"),
        (FirstAttemptMinute, "minute"),
        (GaugeMinute, "minute"),
        (QueueDepthMinute, "minute"),
        (DomainHour, "hour"),
    ):
        deleted += model.objects.filter(**{f"{column}__lt": cutoff}).delete()[0]
    usage_cutoff = (now - timedelta(days=USAGE_RETENTION_DAYS)).date()
    deleted += TenantUsageDay.objects.filter(day__lt=usage_cutoff).delete()[0]
    return deleted
