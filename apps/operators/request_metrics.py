"""Request count and latency by route, method and status, for ``/metrics``.

The web runs as several processes (gunicorn workers, WSGI or ASGI), so one process's in-memory
counters are not the service's. Each process adds its requests up in memory (no I/O on the request
path) and a daemon thread of its own adds them, every SCRAPEJOBS_REQUEST_METRICS_FLUSH_S, to one
Redis hash in one pipeline (HINCRBY / HINCRBYFLOAT); ``/metrics`` reads that hash. Chosen over prometheus_client's
multiprocess directory because that needs a directory shared by every process and cleaned at each
start and at each worker's exit (gunicorn hooks), and only ever sees one host; the Redis hash
sees every process of every host and survives restarts (a counter resets only if Redis is
emptied, which Prometheus's rate() handles). If Redis does not answer, the counts stay in memory
and go at the next flush; requests are never held up or failed by the metrics.

The middleware is sync- and async-capable, so it adds no thread hop under ASGI. The thread is
started at a process's first request, so after gunicorn forked its workers, never before.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import redis
from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.conf import settings
from django.http import HttpRequest, HttpResponseBase

log = logging.getLogger(__name__)

REDIS_KEY = "sj:metrics:http"
# Upper bounds (seconds) of the request latency histogram; the last is +Inf.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    float("inf"),
)
_SEP = "\t"
# Any other method a client sends is counted as "other": labels must stay few.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


@dataclass
class _Pending:
    """Counts not yet sent to Redis: field name -> increment."""

    counts: Counter[str] = field(default_factory=Counter)
    seconds: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))


@functools.cache
def _metrics_redis(url: str) -> redis.Redis:
    """Short timeouts and no retries: a flush must never hold a request for long."""
    return redis.Redis.from_url(
        url, socket_timeout=1, socket_connect_timeout=1, retry=None, decode_responses=True
    )


class RequestRecorder:
    """This process's request counts, flushed to Redis now and then (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending = _Pending()
        self._flusher: threading.Thread | None = None
        self._flusher_pid = 0

    def record(self, *, route: str, method: str, status: int, seconds: float) -> None:
        le = next(b for b in LATENCY_BUCKETS if seconds <= b)
        with self._lock:
            self._ensure_flusher()
            self._pending.counts[_SEP.join(("n", route, method, str(status)))] += 1
            self._pending.counts[_SEP.join(("b", route, method, repr(le)))] += 1
            self._pending.seconds[_SEP.join(("s", route, method))] += seconds

    def _ensure_flusher(self) -> None:
        """Start this process's flusher thread (again in a forked child: threads do not survive
        a fork). Called with the lock held."""
        if self._flusher is not None and self._flusher_pid == os.getpid() and self._flusher.is_alive():
            return
        self._flusher_pid = os.getpid()
        self._flusher = threading.Thread(target=self._flush_forever, name="request-metrics", daemon=True)
        self._flusher.start()

    def _flush_forever(self) -> None:
        while True:
            time.sleep(settings.SCRAPEJOBS_REQUEST_METRICS_FLUSH_S)
            self.flush()

    def flush(self) -> None:
        """Send what was counted since the last flush; on a Redis error, keep it for the next."""
        with self._lock:
            pending, self._pending = self._pending, _Pending()
        if not pending.counts and not pending.seconds:
            return
        try:
            pipe = _metrics_redis(settings.REDIS_URL).pipeline(transaction=False)
            for name, n in pending.counts.items():
                pipe.hincrby(REDIS_KEY, name, n)
            for name, s in pending.seconds.items():
                pipe.hincrbyfloat(REDIS_KEY, name, s)
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("request metrics not sent to Redis, kept for the next flush: %s", exc)
            with self._lock:
                self._pending.counts.update(pending.counts)
                for name, s in pending.seconds.items():
                    self._pending.seconds[name] += s


recorder = RequestRecorder()


def request_route(request: HttpRequest) -> str:
    """The URL pattern that answered (bounded cardinality), not the path with its ids."""
    match = getattr(request, "resolver_match", None)
    return match.route if match is not None and match.route else "unmatched"


def request_totals() -> dict[str, str]:
    """Every process's flushed counts (the Redis hash), after flushing this process's own."""
    recorder.flush()
    totals: dict[str, str] = _metrics_redis(settings.REDIS_URL).hgetall(REDIS_KEY)  # type: ignore[assignment]
    return totals


class RequestMetricsMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if self.is_async:
            return self._acall(request)
        started = time.perf_counter()
        response = self.get_response(request)
        self._record(request, response, time.perf_counter() - started)
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        started = time.perf_counter()
        response = await self.get_response(request)
        self._record(request, response, time.perf_counter() - started)
        return response

    @staticmethod
    def _record(request: HttpRequest, response: HttpResponseBase, seconds: float) -> None:
        recorder.record(
            route=request_route(request),
            method=request.method or "",
            status=response.status_code,
            seconds=seconds,
        )
