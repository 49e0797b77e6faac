"""The dashboard's charts (FR-9, FR-14): over a window of 1 h, 24 h or 7 d, read from the rollup
tables (apps/operators/rollup_runner.py) with one GROUP BY per chart over the window's rows. Nothing
here reads jobs_job or jobs_attempt; the live figures above the charts are apps/operators/live.py's."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, connection
from django.utils import timezone

from apps.operators.rollup_runner import FAILED_OUTCOMES, FIRST_ATTEMPT_BUCKETS
from apps.tenants.models import Tenant

log = logging.getLogger(__name__)

SLO_FIRST_ATTEMPT_S = 60.0  # NFR: 95 % of jobs get their first attempt within 60 s
SLO_SHARE = 0.95
TOP_SERIES = 8


@dataclass(frozen=True)
class Window:
    name: str
    span: timedelta
    step: timedelta
    label_format: str

    @property
    def step_minutes(self) -> float:
        return self.step.total_seconds() / 60


WINDOWS = {
    "1h": Window("1h", timedelta(hours=1), timedelta(minutes=1), "%H:%M"),
    "24h": Window("24h", timedelta(hours=24), timedelta(minutes=15), "%H:%M"),
    "7d": Window("7d", timedelta(days=7), timedelta(hours=2), "%a %H:%M"),
}
DEFAULT_WINDOW = "24h"


@dataclass
class Chart:
    id: str
    title: str
    kind: str  # "line" or "bar"
    labels: list[str]
    datasets: list[dict[str, Any]] = field(default_factory=list)
    unit: str = ""
    note: str = ""
    empty: str = ""  # set: nothing to draw, and why
    error: str = ""  # set: the figures could not be read

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass(frozen=True)
class Buckets:
    """The window cut into steps; ``index`` places a time in its step."""

    window: Window
    start: datetime
    starts: list[datetime]

    @classmethod
    def ending(cls, window: Window, now: datetime) -> Buckets:
        step_s = int(window.step.total_seconds())
        end = datetime.fromtimestamp((int(now.timestamp()) // step_s + 1) * step_s, tz=now.tzinfo)
        n = int(window.span / window.step)
        start = end - window.step * n
        return cls(window, start, [start + window.step * i for i in range(n)])

    @property
    def labels(self) -> list[str]:
        return [s.strftime(self.window.label_format) for s in self.starts]

    def index(self, moment: datetime) -> int:
        return int((moment - self.start) / self.window.step)


def _rows(sql: str, params: dict[str, Any]) -> list[tuple]:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def _binned(buckets: Buckets, sql: str) -> list[tuple]:
    """Run a rollup query whose first column is ``date_bin(%(step)s, <time>, %(origin)s)``."""
    return _rows(sql, {"step": buckets.window.step, "origin": buckets.start, "start": buckets.start})


def _series(buckets: Buckets, points: Mapping[int, float | None]) -> list[float | None]:
    return [points.get(i) for i in range(len(buckets.starts))]


def histogram_quantile(q: float, counts: dict[float, int]) -> float | None:
    """The q-quantile of a histogram given as {upper bound: count}, interpolated within its
    bucket as Prometheus does; the +Inf bucket answers with the highest finite bound."""
    total = sum(counts.values())
    if not total:
        return None
    rank, seen, lower = q * total, 0, 0.0
    for bound in FIRST_ATTEMPT_BUCKETS:
        n = counts.get(bound, 0)
        if seen + n >= rank and n:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - seen) / n
        seen += n
        lower = bound if bound != float("inf") else lower
    return lower


def chart_oldest_queued(buckets: Buckets) -> Chart:
    rows = _binned(
        buckets,
        "SELECT date_bin(%(step)s, minute, %(origin)s), max(oldest_queued_age_s), "
        "max(oldest_dispatchable_age_s) FROM operators_gaugeminute WHERE minute >= %(start)s GROUP BY 1",
    )
    chart = Chart(
        "oldest-queued",
        "Age of the oldest queued job, and of the oldest a worker could start now",
        "line",
        buckets.labels,
        unit="s",
        note="Dispatchable: due and not parked; the autoscaler's signal (docs/kubernetes.md). "
        "Queued also counts retries in backoff, domain deferrals and jobs parked on another's fetch.",
    )
    chart.datasets = [
        {"label": "oldest queued (s)", "data": _series(buckets, {buckets.index(b): v for b, v, _ in rows})},
        {
            "label": "oldest dispatchable (s)",
            "data": _series(buckets, {buckets.index(b): v for b, _, v in rows}),
        },
    ]
    chart.empty = "" if rows else "No queue readings in this window yet."
    return chart


def chart_first_attempt(buckets: Buckets) -> Chart:
    rows = _binned(
        buckets,
        "SELECT date_bin(%(step)s, minute, %(origin)s), le, sum(count) FROM operators_firstattemptminute "
        "WHERE minute >= %(start)s GROUP BY 1, 2",
    )
    per_bucket: defaultdict[int, dict[float, int]] = defaultdict(dict)
    overall: defaultdict[float, int] = defaultdict(int)
    for b, le, n in rows:
        per_bucket[buckets.index(b)][le] = int(n)
        overall[le] += int(n)
    chart = Chart(
        "first-attempt",
        "Time to first attempt, p50 and p95, against the SLO",
        "line",
        buckets.labels,
        unit="s",
    )
    chart.datasets = [
        {
            "label": "p50 (s)",
            "data": _series(buckets, {i: histogram_quantile(0.5, c) for i, c in per_bucket.items()}),
        },
        {
            "label": "p95 (s)",
            "data": _series(buckets, {i: histogram_quantile(0.95, c) for i, c in per_bucket.items()}),
        },
        {"label": "SLO: 95 % within 60 s", "data": [SLO_FIRST_ATTEMPT_S] * len(buckets.starts), "slo": True},
    ]
    total = sum(overall.values())
    if not total:
        chart.empty = "No job had its first attempt in this window."
        return chart
    within = sum(n for le, n in overall.items() if le <= SLO_FIRST_ATTEMPT_S)
    share = within / total
    verdict = "met" if share >= SLO_SHARE else "MISSED"
    chart.note = f"{share:.1%} of {total} jobs started within 60 s in this window: SLO {verdict}."
    return chart


def _attempt_rows(buckets: Buckets) -> list[tuple]:
    return _binned(
        buckets,
        "SELECT date_bin(%(step)s, minute, %(origin)s), outcome, error_class, sum(attempts), sum(dead_letters) "
        "FROM operators_attemptminute WHERE minute >= %(start)s GROUP BY 1, 2, 3",
    )


def chart_throughput(buckets: Buckets, rows: list[tuple]) -> Chart:
    succeeded: defaultdict[int, float] = defaultdict(float)
    ended: defaultdict[int, float] = defaultdict(float)
    for b, outcome, _, n, _ in rows:
        i = buckets.index(b)
        ended[i] += n / buckets.window.step_minutes
        if outcome == "succeeded":
            succeeded[i] += n / buckets.window.step_minutes
    chart = Chart("throughput", "Throughput (per minute)", "line", buckets.labels, unit="/min")
    chart.datasets = [
        {"label": "jobs succeeded / min", "data": _series(buckets, dict(succeeded))},
        {"label": "attempts ended / min", "data": _series(buckets, dict(ended))},
    ]
    chart.empty = "" if rows else "No attempt ended in this window."
    return chart


def chart_failures_by_class(buckets: Buckets, rows: list[tuple]) -> Chart:
    ended: defaultdict[int, int] = defaultdict(int)
    failed: defaultdict[str, defaultdict[int, int]] = defaultdict(lambda: defaultdict(int))
    for b, outcome, error_class, n, _ in rows:
        i = buckets.index(b)
        ended[i] += n
        if outcome in FAILED_OUTCOMES:
            failed[error_class or outcome][i] += n
    top = sorted(failed, key=lambda c: -sum(failed[c].values()))[:TOP_SERIES]
    chart = Chart(
        "failures-by-class",
        "Failure rate by error class (% of ended attempts)",
        "line",
        buckets.labels,
        unit="%",
    )
    chart.datasets = [
        {"label": c, "data": _series(buckets, {i: 100 * n / ended[i] for i, n in failed[c].items()})}
        for c in top
    ]
    chart.empty = "" if top else "No failed attempt in this window."
    return chart


def chart_dead_letters(buckets: Buckets, rows: list[tuple]) -> Chart:
    dead: defaultdict[int, float] = defaultdict(float)
    for b, _, _, _, d in rows:
        dead[buckets.index(b)] += d
    lag_rows = _binned(
        buckets,
        "SELECT date_bin(%(step)s, minute, %(origin)s), max(writer_dead_receipts) FROM operators_gaugeminute "
        "WHERE minute >= %(start)s GROUP BY 1",
    )
    chart = Chart(
        "dead-letters", "Dead letters: jobs that failed, writer dead receipts", "line", buckets.labels
    )
    chart.datasets = [
        {"label": "jobs failed (dead letters)", "data": _series(buckets, dict(dead))},
        {
            "label": "writer dead receipts",
            "data": _series(buckets, {buckets.index(b): v for b, v in lag_rows}),
        },
    ]
    chart.empty = "" if rows or lag_rows else "No attempts or writer readings in this window yet."
    return chart


def chart_not_modified_bytes(buckets: Buckets) -> Chart:
    """Body bytes targets did not send because they answered a revalidation 304 (FR-35)."""
    rows = _binned(
        buckets,
        "SELECT date_bin(%(step)s, minute, %(origin)s), sum(bytes_kept) "
        "FROM operators_attemptminute WHERE minute >= %(start)s AND bytes_kept > 0 GROUP BY 1",
    )
    chart = Chart(
        "not-modified-bytes", "Bytes not transferred (304 Not Modified)", "line", buckets.labels, unit="MiB"
    )
    chart.datasets = [
        {
            "label": "MiB kept instead of fetched again",
            "data": _series(buckets, {buckets.index(b): round(int(n) / 2**20, 3) for b, n in rows}),
        }
    ]
    chart.empty = "" if rows else "No revalidation was answered 304 in this window."
    return chart


def chart_failures_by_domain(buckets: Buckets) -> Chart:
    rows = _rows(
        "SELECT domain, sum(attempts), sum(failures) FROM operators_domainhour "
        "WHERE hour >= date_trunc('hour', %(start)s::timestamptz) "
        "GROUP BY 1 HAVING sum(failures) > 0 ORDER BY 3 DESC, 1 LIMIT 10",
        {"start": buckets.start},
    )
    chart = Chart(
        "failures-by-domain",
        "Failure rate by domain (% of attempts; the 10 domains with most failures)",
        "bar",
        [f"{d} ({f} of {a})" for d, a, f in rows],
        unit="%",
    )
    chart.datasets = [{"label": "failed attempts (%)", "data": [round(100 * f / a, 1) for _, a, f in rows]}]
    chart.empty = "" if rows else "No failed attempt in this window."
    return chart


def chart_queue_depth(buckets: Buckets) -> Chart:
    rows = _binned(
        buckets,
        "SELECT date_bin(%(step)s, minute, %(origin)s), tenant_id, priority, max(depth) FROM operators_queuedepthminute "
        "WHERE minute >= %(start)s GROUP BY 1, 2, 3",
    )
    series: defaultdict[tuple[Any, str], dict[int, float]] = defaultdict(dict)
    for b, tenant_id, priority, depth in rows:
        series[(tenant_id, priority)][buckets.index(b)] = depth
    top = sorted(series, key=lambda k: -max(series[k].values()))[:TOP_SERIES]
    names = dict(Tenant.objects.filter(id__in={t for t, _ in top}).values_list("id", "name"))
    chart = Chart("queue-depth", "Queue depth per tenant and priority", "line", buckets.labels, unit="jobs")
    chart.datasets = [
        {"label": f"{names.get(t, t)} / {p}", "data": _series(buckets, series[(t, p)])} for t, p in top
    ]
    chart.empty = "" if top else "Nothing was queued at any reading in this window."
    return chart


def _gauge_chart(buckets: Buckets, chart: Chart, column: str, label: str) -> Chart:
    rows = _binned(
        buckets,
        f"SELECT date_bin(%(step)s, minute, %(origin)s), max({column}) FROM operators_gaugeminute "
        "WHERE minute >= %(start)s GROUP BY 1",
    )
    chart.datasets = [{"label": label, "data": _series(buckets, {buckets.index(b): v for b, v in rows})}]
    chart.empty = "" if rows else "No readings in this window yet."
    return chart


def chart_past_lease(buckets: Buckets) -> Chart:
    chart = Chart("past-lease", "Jobs running past their lease", "line", buckets.labels, unit="jobs")
    return _gauge_chart(buckets, chart, "running_past_lease", "running past lease")


def chart_writer_lag(buckets: Buckets) -> Chart:
    chart = Chart(
        "writer-lag", "Writer lag (oldest receipt not yet applied)", "line", buckets.labels, unit="s"
    )
    return _gauge_chart(buckets, chart, "writer_lag_s", "writer lag (s)")


def _guarded(chart_id: str, title: str, build: Callable[[], Chart]) -> Chart:
    """A chart whose figures could not be read says so, and the others still show."""
    try:
        return build()
    except DatabaseError as exc:
        log.exception("dashboard chart %s failed", chart_id)
        return Chart(
            chart_id, title, "line", [], error=f"Could not read the figures: {exc.__class__.__name__}: {exc}"
        )


def dashboard_charts(*, window: Window, now: datetime | None = None) -> list[Chart]:
    buckets = Buckets.ending(window, now or timezone.now())
    attempt_rows: list[tuple] | None = None

    def attempts() -> list[tuple]:
        nonlocal attempt_rows
        if attempt_rows is None:
            attempt_rows = _attempt_rows(buckets)
        return attempt_rows

    builders: list[tuple[str, str, Callable[[], Chart]]] = [
        ("oldest-queued", "Age of the oldest queued job", lambda: chart_oldest_queued(buckets)),
        ("first-attempt", "Time to first attempt", lambda: chart_first_attempt(buckets)),
        ("throughput", "Throughput", lambda: chart_throughput(buckets, attempts())),
        ("failures-by-class", "Failure rate by class", lambda: chart_failures_by_class(buckets, attempts())),
        ("failures-by-domain", "Failure rate by domain", lambda: chart_failures_by_domain(buckets)),
        ("queue-depth", "Queue depth per tenant and priority", lambda: chart_queue_depth(buckets)),
        ("past-lease", "Jobs running past their lease", lambda: chart_past_lease(buckets)),
        ("writer-lag", "Writer lag", lambda: chart_writer_lag(buckets)),
        ("dead-letters", "Dead letters", lambda: chart_dead_letters(buckets, attempts())),
        ("not-modified-bytes", "Bytes not transferred", lambda: chart_not_modified_bytes(buckets)),
    ]
    return [_guarded(chart_id, title, build) for chart_id, title, build in builders]
