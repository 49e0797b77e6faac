"""One trace per job (FR-29, docs/tracing.md): OpenTelemetry, off unless configured.

Tracing is on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_TRACES_EXPORTER`` is set (read once
in settings/base.py as ``SCRAPEJOBS_TRACING``). Each process calls ``tracing_start`` once at
start-up (scrapejobs/asgi.py, scrapejobs/wsgi.py, the Celery signals of scrapejobs/celery.py);
with tracing off it returns at once and no ``opentelemetry`` module is ever imported, so every
helper below is a ``None`` check and a job costs what it did (no column written, no field on a
receipt, no header on a message).

A job's trace: the ``POST /jobs`` request span's W3C ``traceparent`` is written with the job's
row (``jobs_job.trace_context``, in intake's one INSERT); the publisher makes a ``job.publish``
span under it and sends that span's ``traceparent`` in the scrape message; the worker's
``job.attempt`` span hangs under that, with the claim, politeness wait, fetch, upload and
receipt spans inside it; the receipt carries the attempt's ``traceparent`` to the writer. A
step done for many jobs at once (a publish batch, a fold of receipts) is one span linked to
each job's span (span links), not a child of any one of them.

A neutral module (no import of apps or of the project package): apps.jobs uses it too.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

# The tracer once tracing_start made one; None means off (every helper then does nothing).
_tracer: Any = None
_started_lock = threading.Lock()

TRACEPARENT = "traceparent"


def tracing_on() -> bool:
    return _tracer is not None


def tracing_start(
    *, component: str, instrument: Sequence[str] = (), url_mask: Callable[[str], str] | None = None
) -> bool:
    """Set up the SDK for this process (once; later calls do nothing) and instrument the
    libraries named in ``instrument`` (``django``, ``celery``, ``psycopg``, ``redis``,
    ``urllib3``). Returns whether tracing is on. Off (``SCRAPEJOBS_TRACING`` false): returns
    False having imported nothing. ``url_mask``: what the URLs the instrumentations record go
    through (the logs' masking, ``apps.runtime.logs.secrets_masked``, passed in by the process's
    entry point: this module imports no app)."""
    global _tracer, _url_mask
    if url_mask is not None:
        _url_mask = url_mask
    from django.conf import settings  # noqa: PLC0415 - read when the process starts, not at import

    if not settings.SCRAPEJOBS_TRACING:
        return False
    with _started_lock:
        if _tracer is not None:
            return True
        from opentelemetry import trace  # noqa: PLC0415 - only when tracing is on
        from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
        from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415

        # OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES (read by Resource.create) win over ours.
        resource = Resource.create(
            {"service.name": f"scrapejobs-{component}", "scrapejobs.component": component}
        )
        provider = TracerProvider(resource=resource)  # reads OTEL_TRACES_SAMPLER itself
        provider.add_span_processor(_span_processor(settings))
        trace.set_tracer_provider(provider)
        _instrument(instrument)
        _tracer = trace.get_tracer("scrapejobs")
        return True


def _span_processor(settings: Any) -> Any:
    """The exporter ``OTEL_TRACES_EXPORTER`` names: ``otlp`` (the default when only the endpoint
    is set; batched, over HTTP), ``console`` (each span on stdout) or ``file`` (one JSON object a
    line in ``SCRAPEJOBS_TRACE_FILE``, for tests and a development machine)."""
    from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
    )

    kind = settings.SCRAPEJOBS_TRACES_EXPORTER
    if kind == "console":
        return SimpleSpanProcessor(ConsoleSpanExporter())
    if kind == "file":
        return SimpleSpanProcessor(_file_exporter(settings.SCRAPEJOBS_TRACE_FILE))
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: PLC0415

    return BatchSpanProcessor(OTLPSpanExporter())  # reads OTEL_EXPORTER_OTLP_* itself


def _file_exporter(path: str) -> Any:
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult  # noqa: PLC0415

    class JsonLinesExporter(SpanExporter):  # type: ignore[misc]
        """Appends each span as one compact JSON line; several processes may share the file
        (one ``write`` of one line per span, the file opened for appending)."""

        def __init__(self) -> None:
            self._lock = threading.Lock()

        def export(self, spans: Sequence[Any]) -> Any:
            lines = "".join(json.dumps(json.loads(s.to_json()), separators=(",", ":")) + "\n" for s in spans)
            with self._lock:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, lines.encode())
                finally:
                    os.close(fd)
            return SpanExportResult.SUCCESS

    return JsonLinesExporter()


# Where the instrumentations put a request's URL (older and current semantic conventions).
_URL_ATTRIBUTES = ("http.url", "url.full", "http.target", "url.path", "url.query")


def _unmasked(url: str) -> str:
    return url


_url_mask: Callable[[str], str] = _unmasked


def _span_urls_masked(span: Any, *_: Any) -> None:
    """A request hook: the URL attributes the instrumentation just set, masked as a log line is
    (``tracing_start``'s ``url_mask``: a ``?token=`` or ``?api_key=`` value, a signed result
    link's token). Exported spans leave the service; a credential in a URL must not go with them."""
    attributes = getattr(span, "attributes", None) or {}
    for key in _URL_ATTRIBUTES:
        value = attributes.get(key)
        if isinstance(value, str):
            masked = _url_mask(value)
            if masked != value:
                span.set_attribute(key, masked)


def _instrument(names: Sequence[str]) -> None:
    # The maintained instrumentations; each patches its library for the whole process. Those
    # that record URLs mask them (``_span_urls_masked``).
    if "django" in names:
        from opentelemetry.instrumentation.django import DjangoInstrumentor  # noqa: PLC0415

        DjangoInstrumentor().instrument(request_hook=_span_urls_masked)
    if "celery" in names:
        from opentelemetry.instrumentation.celery import CeleryInstrumentor  # noqa: PLC0415

        CeleryInstrumentor().instrument()
    if "psycopg" in names:
        from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor  # noqa: PLC0415

        PsycopgInstrumentor().instrument(enable_commenter=False)
    if "redis" in names:
        from opentelemetry.instrumentation.redis import RedisInstrumentor  # noqa: PLC0415

        RedisInstrumentor().instrument()
    if "urllib3" in names:
        from opentelemetry.instrumentation.urllib3 import URLLib3Instrumentor  # noqa: PLC0415

        URLLib3Instrumentor().instrument(request_hook=_span_urls_masked)


def traceparent_current() -> str | None:
    """The W3C ``traceparent`` of the span current in this thread; None when tracing is off or
    no span is current (what intake stores with a job, a receipt carries)."""
    if _tracer is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator  # noqa: PLC0415

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get(TRACEPARENT)


def _context_of(traceparent: str | None) -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator  # noqa: PLC0415

    return TraceContextTextMapPropagator().extract({TRACEPARENT: traceparent} if traceparent else {})


def _span_context_of(traceparent: str | None) -> Any:
    from opentelemetry import trace  # noqa: PLC0415

    sc = trace.get_current_span(_context_of(traceparent)).get_span_context()
    return sc if sc.is_valid else None


@contextmanager
def span(
    name: str,
    *,
    parent: str | None = None,
    links: Sequence[str | None] = (),
    attributes: dict[str, Any] | None = None,
    root: bool = False,
    start_ns: int | None = None,
) -> Iterator[Any]:
    """A span named ``name``, current inside the block; yields it (None when tracing is off).

    ``parent``: a stored ``traceparent`` the span hangs under (a job's), instead of the span
    current in this thread; ``root``: a new trace even when a span is current (a batch step);
    ``links``: the ``traceparent`` of each job a batch step served (None entries are skipped);
    ``start_ns``: when the step began (``time.time_ns()``), for a span made once it is over."""
    if _tracer is None:
        with nullcontext():
            yield None
        return
    from opentelemetry import context as otel_context  # noqa: PLC0415
    from opentelemetry import trace  # noqa: PLC0415

    if parent is not None:
        # Already inside that trace (the Celery instrumentation's span for the task carried the
        # same trace in the message headers): nest under the current span, else under ``parent``.
        current = trace.get_current_span().get_span_context()
        stored = _span_context_of(parent)
        inside = current.is_valid and stored is not None and current.trace_id == stored.trace_id
        ctx = None if inside else _context_of(parent)
    elif root:
        ctx = otel_context.Context()
    else:
        ctx = None
    span_links = [trace.Link(sc) for sc in (_span_context_of(tp) for tp in links if tp) if sc is not None]
    with _tracer.start_as_current_span(
        name, context=ctx, links=span_links, attributes=attributes, start_time=start_ns
    ) as s:
        yield s


def span_set(s: Any, **attributes: Any) -> None:
    """Set attributes on ``s`` (a span from ``span``; None: tracing is off, nothing to do).
    None values are left out (OpenTelemetry refuses them)."""
    if s is not None:
        s.set_attributes({k: v for k, v in attributes.items() if v is not None})


def trace_id_current() -> str:
    """The current trace's id as 32 hex digits, for log lines; "" when off or outside a span."""
    if _tracer is None:
        return ""
    from opentelemetry import trace  # noqa: PLC0415

    sc = trace.get_current_span().get_span_context()
    return format(sc.trace_id, "032x") if sc.is_valid else ""
