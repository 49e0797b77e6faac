"""``/metrics`` with prometheus_client: a collector that reads, at each scrape, only small tables
and bounded queries - the rollups' running totals (apps/operators/rollup_runner.py), the queued and
running jobs (partial indexes), the writer's Redis keys and the request counters' Redis hash - so
a scrape costs the same at ten jobs and at a million (``make bench BENCH=metrics``)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator

import redis
from django.conf import settings
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from apps.crawls.rollups import crawls_running_count
from apps.jobs.models import Priority
from apps.jobs.rollups import queue_snapshot
from apps.operators.models import AttemptTotal, CrawlTotal, DomainTotal, FirstAttemptTotal, RollupState
from apps.operators.request_metrics import LATENCY_BUCKETS, request_totals
from apps.operators.rollup_runner import FIRST_ATTEMPT_BUCKETS, writer_reading
from apps.tenants.models import Tenant

log = logging.getLogger(__name__)


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


def cumulative_buckets(counts: dict[float, float], bounds: tuple[float, ...]) -> list[tuple[str, float]]:
    """Prometheus buckets are cumulative: each ``le`` counts every observation at or below it."""
    running = 0.0
    out = []
    for bound in bounds:
        running += counts.get(bound, 0)
        out.append((_le(bound), running))
    return out


class ScrapejobsCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield from self._queue()
        yield from self._writer()
        yield from self._attempts()
        yield from self._first_attempt()
        yield from self._crawls()
        yield from self._requests()

    def _crawls(self) -> Iterator[Metric]:
        # FR-46: ended crawls from the rollup (as of its last run); running ones read now.
        ended = CounterMetricFamily("scrapejobs_crawls", "Crawls that ended, by status.", labels=["status"])
        totals = dict(CrawlTotal.objects.values_list("status", "crawls"))
        for status in ("completed", "cancelled"):
            ended.add_metric([status], totals.pop(status, 0))
        for status, n in sorted(totals.items()):
            ended.add_metric([status], n)
        yield ended
        yield GaugeMetricFamily(
            "scrapejobs_crawls_running", "Crawls running now.", value=crawls_running_count()
        )

    def _queue(self) -> Iterator[Metric]:
        snap = queue_snapshot()
        jobs = GaugeMetricFamily("scrapejobs_jobs", "Jobs queued or running now.", labels=["status"])
        jobs.add_metric(["queued"], snap.queued)
        jobs.add_metric(["running"], snap.running)
        yield jobs
        yield GaugeMetricFamily(
            "scrapejobs_oldest_queued_job_age_seconds",
            "Age of the oldest queued job (0 when none).",
            value=snap.oldest_queued_age_s,
        )
        # The scaling signal (FR-27, docs/kubernetes.md): jobs more workers would start now. Every
        # priority is exported, 0 included, so an autoscaler's query always has its series.
        yield GaugeMetricFamily(
            "scrapejobs_oldest_dispatchable_job_age_seconds",
            "Age of the oldest queued job a worker could start now: due (not in a retry backoff or "
            "a domain deferral) and not parked behind another job's fetch; counted from when it "
            "became due (0 when none).",
            value=snap.oldest_dispatchable_age_s,
        )
        dispatchable = GaugeMetricFamily(
            "scrapejobs_dispatchable_jobs",
            "Queued jobs a worker could start now, per priority.",
            labels=["priority"],
        )
        by_priority = snap.dispatchable_by_priority()
        for priority in Priority.values:
            dispatchable.add_metric([priority], by_priority.get(priority, 0))
        yield dispatchable
        # Of them, the jobs to render (FR-30): the browser component scales on these.
        yield GaugeMetricFamily(
            "scrapejobs_oldest_dispatchable_browser_job_age_seconds",
            "Age of the oldest dispatchable job to render in a browser (0 when none).",
            value=snap.oldest_browser_dispatchable_age_s,
        )
        yield GaugeMetricFamily(
            "scrapejobs_dispatchable_browser_jobs",
            "Dispatchable jobs to render in a browser (render: browser).",
            value=snap.browser_dispatchable,
        )
        yield GaugeMetricFamily(
            "scrapejobs_jobs_running_past_lease",
            "Running jobs whose lease has expired (their worker is gone; the sweeper requeues them).",
            value=snap.running_past_lease,
        )
        names = dict(
            Tenant.objects.filter(id__in={d.tenant_id for d in snap.depths}).values_list("id", "name")
        )
        depth = GaugeMetricFamily(
            "scrapejobs_queue_depth", "Queued jobs per tenant and priority.", labels=["tenant", "priority"]
        )
        for d in snap.depths:
            depth.add_metric([names.get(d.tenant_id, str(d.tenant_id)), d.priority], d.depth)
        yield depth

    def _writer(self) -> Iterator[Metric]:
        lag_s, dead = writer_reading()
        if lag_s is None:
            return  # Redis did not answer: no value rather than a false zero
        yield GaugeMetricFamily(
            "scrapejobs_writer_lag_seconds",
            "Age of the oldest receipt the writer has not applied.",
            value=lag_s,
        )
        yield GaugeMetricFamily(
            "scrapejobs_writer_dead_receipts",
            "Receipts the writer gave up on (admin: writer dead receipts).",
            value=dead,
        )

    def _attempts(self) -> Iterator[Metric]:
        attempts = CounterMetricFamily(
            "scrapejobs_attempts",
            "Ended attempts by outcome and error class.",
            labels=["outcome", "error_class"],
        )
        dead = CounterMetricFamily(
            "scrapejobs_dead_letters",
            "Jobs that ended failed (dead letters), by error class.",
            labels=["error_class"],
        )
        dead_by_class: defaultdict[str, int] = defaultdict(int)
        kept = 0
        for t in AttemptTotal.objects.all():
            attempts.add_metric([t.outcome, t.error_class], t.attempts)
            dead_by_class[t.error_class] += t.dead_letters
            kept += t.bytes_kept
        for error_class, n in sorted(dead_by_class.items()):
            dead.add_metric([error_class], n)
        by_domain = CounterMetricFamily(
            "scrapejobs_domain_attempts", "Ended attempts by target domain.", labels=["domain"]
        )
        failed_by_domain = CounterMetricFamily(
            "scrapejobs_domain_failed_attempts",
            "Failed attempts (temporary, permanent, lost) by target domain.",
            labels=["domain"],
        )
        # Only the domains an operator names (SCRAPEJOBS_METRICS_DOMAINS): one series per domain
        # ever fetched grew /metrics without bound; the dashboard has every domain.
        for d in DomainTotal.objects.filter(domain__in=settings.SCRAPEJOBS_METRICS_DOMAINS):
            by_domain.add_metric([d.domain], d.attempts)
            failed_by_domain.add_metric([d.domain], d.failures)
        # FR-35: the body bytes targets did not send because they answered a revalidation 304.
        not_sent = CounterMetricFamily(
            "scrapejobs_not_modified_bytes",
            "Body bytes not transferred: the kept bodies of attempts answered 304 Not Modified.",
            value=kept,
        )
        yield from (attempts, dead, by_domain, failed_by_domain, not_sent)
        state = RollupState.objects.filter(pk=1).values_list("updated_at", flat=True).first()
        if state is not None:
            yield GaugeMetricFamily(
                "scrapejobs_rollup_last_run_timestamp_seconds",
                "When the rollup task last moved (the counters above are as of then).",
                value=state.timestamp(),
            )

    def _first_attempt(self) -> Iterator[Metric]:
        rows = list(FirstAttemptTotal.objects.values_list("le", "count", "sum_s"))
        counts = {le: float(n) for le, n, _ in rows}
        hist = HistogramMetricFamily(
            "scrapejobs_time_to_first_attempt_seconds",
            "From intake to the first attempt's start (SLO: 95% within 60 s).",
            buckets=cumulative_buckets(counts, FIRST_ATTEMPT_BUCKETS),
            sum_value=sum(s for _, _, s in rows),
        )
        yield hist

    def _requests(self) -> Iterator[Metric]:
        try:
            totals = request_totals()
        except redis.RedisError as exc:
            log.warning("request metrics unavailable: %s", exc)
            return
        count = CounterMetricFamily(
            "scrapejobs_http_requests",
            "HTTP requests by route, method and status.",
            labels=["route", "method", "status"],
        )
        buckets: defaultdict[tuple[str, str], dict[float, float]] = defaultdict(dict)
        sums: dict[tuple[str, str], float] = {}
        for name, value in sorted(totals.items()):
            kind, *labels = name.split("\t")
            if kind == "n":
                count.add_metric(labels, float(value))
            elif kind == "b":
                buckets[(labels[0], labels[1])][float(labels[2])] = float(value)
            elif kind == "s":
                sums[(labels[0], labels[1])] = float(value)
        latency = HistogramMetricFamily(
            "scrapejobs_http_request_duration_seconds",
            "HTTP request latency by route and method.",
            labels=["route", "method"],
        )
        for key in sorted(buckets):
            latency.add_metric(
                list(key), cumulative_buckets(buckets[key], LATENCY_BUCKETS), sums.get(key, 0.0)
            )
        yield count
        yield latency


def metrics_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ScrapejobsCollector())
    return registry
