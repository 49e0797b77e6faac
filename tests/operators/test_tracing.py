"""One trace per job (FR-29, docs/tracing.md) through the real web, worker and control component:
the spans all three processes write (``OTEL_TRACES_EXPORTER=file``) for one job share its trace id
and hang under the ``POST /jobs`` request span, a retry is a new attempt span in the same trace,
and the batch steps are linked to the job. With tracing off no trace context is kept and no
process imports OpenTelemetry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests

from apps.jobs.models import Job, JobStatus
from apps.jobs.receipts import AttemptFinished, receipt_decode, receipt_encode
from tests.e2e.fault_support import wait_all_final
from tests.support.net import free_port
from tests.support.procs import wait_for, wait_for_web


def _spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _trace_id(span: dict[str, Any]) -> str:
    return str(span["context"]["trace_id"])


def _ancestors(span: dict[str, Any], by_id: dict[str, dict[str, Any]]) -> list[str]:
    """The names of ``span``'s parents, nearest first, as far as the file has them."""
    names = []
    parent = span.get("parent_id")
    while parent and parent in by_id:
        names.append(by_id[parent]["name"])
        parent = by_id[parent].get("parent_id")
    return names


def _start(services: Any, env: dict[str, str]) -> tuple[Any, int]:
    svc = services(**env)
    port = free_port()
    web = svc.start("web", port=port, workers=1)
    svc.start("control")
    svc.start("beat")  # the publisher's tick: a retry is published when its backoff has passed
    svc.start("worker", concurrency=2)
    wait_for_web(web, port)
    return svc, port


def _post_job(port: int, token: str, url: str) -> str:
    r = requests.post(
        f"http://127.0.0.1:{port}/api/v1/jobs",
        json={"url": url},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert r.status_code in (200, 201, 202), r.text
    return str(r.json()["id"])


# What a process that set up tracing imports (apps/tracing.py); one with tracing off, none of it.
TRACING_MODULES = (
    "opentelemetry.sdk.trace",
    "opentelemetry.instrumentation",
    "opentelemetry.exporter",
    "opentelemetry.propagate",
    "opentelemetry.trace.propagation.tracecontext",
)

PROBE_DIR = Path(__file__).resolve().parents[1] / "support" / "import_probe"


def _probe_env(probe: Path) -> dict[str, str]:
    """Each process records every ``opentelemetry`` module it imports into ``probe``
    (tests/support/import_probe/sitecustomize.py)."""
    return {"PYTHONPATH": str(PROBE_DIR), "SJ_TEST_IMPORT_PROBE": str(probe)}


ENV = {
    "SCRAPEJOBS_PUBLISH_INTERVAL_S": "0.25",
    "SCRAPEJOBS_RETRY_BASE_S": "0.2",
    "SCRAPEJOBS_RETRY_CAP_S": "0.5",
}


@pytest.mark.e2e
def test_one_jobs_spans_from_web_worker_and_writer_share_its_trace_with_the_right_parents(
    services: Any, make_tenant: Any, target: Any, tmp_path: Path
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    probe = tmp_path / "imports.txt"
    env = {
        **ENV,
        **_probe_env(probe),
        "OTEL_TRACES_EXPORTER": "file",
        "SCRAPEJOBS_TRACE_FILE": str(spans_file),
        "SCRAPEJOBS_RESULTS_DIR": str(tmp_path / "results"),
        "SCRAPEJOBS_LOG_FORMAT": "json",
    }
    svc, port = _start(services, env)
    _, token, _ = make_tenant()
    # Fails once with a 503, then answers: two attempts, the second a retry.
    job_id = _post_job(port, token, target.url("/flaky/trace?fail=1&api_key=s3cr3t-in-the-url"))
    wait_all_final([job_id], timeout=60)
    # The result through its signed link, whose token is the credential: the web's span records
    # the request's path.
    link = requests.get(
        f"http://127.0.0.1:{port}/api/v1/jobs/{job_id}/result",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    ).json()["url"]
    assert requests.get(link, timeout=30).status_code == 200
    link_token = link.rstrip("/").rsplit("/", 1)[-1].split("?")[0]
    job = Job.objects.get(id=job_id)
    assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 2)
    assert job.trace_context and job.trace_context.startswith("00-")
    trace_id = "0x" + job.trace_context.split("-")[1]

    def folded() -> list[dict[str, Any]]:
        return [s for s in _spans(spans_file) if s["name"] == "job.fold" and _trace_id(s) == trace_id]

    wait_for(lambda: len(folded()) == 2, timeout=20, what="both attempts' fold spans")
    spans = _spans(spans_file)
    by_id = {s["context"]["span_id"]: s for s in spans}
    mine = [s for s in spans if _trace_id(s) == trace_id]
    named: dict[str, list[dict[str, Any]]] = {}
    for s in mine:
        named.setdefault(s["name"], []).append(s)

    # From all three processes, in one trace.
    services_seen = {s["resource"]["attributes"]["service.name"] for s in mine}
    assert {"scrapejobs-web", "scrapejobs-worker", "scrapejobs-control"} <= services_seen, services_seen

    # The request span is the root; the job's row holds its context.
    (request,) = [s for s in mine if s.get("parent_id") is None]
    assert request["kind"] == "SpanKind.SERVER" and "POST" in request["name"], request["name"]
    assert job.trace_context.split("-")[2] == request["context"]["span_id"].removeprefix("0x")

    # Publish (once per attempt: the retry is published again) under the request span.
    publishes = named["job.publish"]
    assert len(publishes) == 2
    assert all(p["parent_id"] == request["context"]["span_id"] for p in publishes)

    # Two attempts, each under a publish span; a retry is a new span in the same trace.
    attempts = named["job.attempt"]
    assert len(attempts) == 2
    assert sorted(a["attributes"]["scrapejobs.attempt"] for a in attempts) == [1, 2]
    for a in attempts:
        assert "job.publish" in _ancestors(a, by_id) and _ancestors(a, by_id)[-1] == request["name"]
    ok = next(a for a in attempts if a["attributes"]["scrapejobs.attempt"] == 2)
    for step in ("job.politeness_wait", "job.claim", "job.fetch", "job.receipt"):
        assert len(named[step]) == 2, step
        assert all(_ancestors(s, by_id)[0] == "job.attempt" for s in named[step]), step
    (upload,) = named["job.upload"]  # only the attempt that got a 200 stored a body
    assert _ancestors(upload, by_id)[:2] == ["job.fetch", "job.attempt"]
    assert upload["parent_id"] in {f["context"]["span_id"] for f in named["job.fetch"]}
    fetch_ok = by_id[upload["parent_id"]]
    assert fetch_ok["attributes"]["server.address"] == "127.0.0.1"
    assert fetch_ok["attributes"]["http.response.status_code"] == 200
    assert fetch_ok["attributes"]["scrapejobs.bytes"] == len(b"ok after 1 failures")
    assert _ancestors(fetch_ok, by_id)[0] == "job.attempt"
    assert by_id[fetch_ok["parent_id"]] is ok
    statuses = sorted(f["attributes"]["http.response.status_code"] for f in named["job.fetch"])
    assert statuses == [200, 503]

    # The writer's fold: a job.fold span under each attempt, linked to the batch's span, which
    # is a trace of its own linked back to the attempt.
    attempt_ids = {a["context"]["span_id"] for a in attempts}
    for f in folded():
        assert f["parent_id"] in attempt_ids
        (link,) = f["links"]
        batch = by_id[link["context"]["span_id"]]
        assert batch["name"] == "receipts.fold" and batch.get("parent_id") is None
        assert _trace_id(batch) != trace_id
        assert f["parent_id"] in {lk["context"]["span_id"] for lk in batch["links"]}

    # The publish batch: a root span of its own, linked to the job's request span.
    batches = [
        s
        for s in spans
        if s["name"] == "outbox.publish_batch"
        and request["context"]["span_id"] in {lk["context"]["span_id"] for lk in s["links"]}
    ]
    assert len(batches) == 2 and all(b.get("parent_id") is None for b in batches)

    # No exported span carries a credential of a URL: the target's query value, the link's token
    # (the instrumentations' request hooks mask them as a log line is).
    exported = spans_file.read_text()
    assert "s3cr3t-in-the-url" not in exported
    assert link_token not in exported and "/results/<link>" in exported

    # The import probe sees OpenTelemetry in every process when tracing is on (so its silence
    # in the test with tracing off means something).
    importers = {
        line.split()[0]
        for line in probe.read_text().splitlines()
        if line.split()[1].startswith(TRACING_MODULES)
    }
    assert len(importers) >= 4, importers  # the web's worker, the worker, the control component and beat

    # Log lines about the job carry its trace id (the worker's attempt-failure warning).
    svc.stop()
    logs = "\n".join(p.log.read_text(errors="replace") for p in svc.procs)
    lines = [json.loads(x) for x in logs.splitlines() if x.startswith("{") and job_id in x]
    assert any(line.get("trace_id") == trace_id.removeprefix("0x") for line in lines), lines[-5:]


@pytest.mark.e2e
def test_with_tracing_off_no_trace_is_kept_and_no_process_imports_opentelemetry(
    services: Any, make_tenant: Any, target: Any, tmp_path: Path
) -> None:
    probe = tmp_path / "imports.txt"
    env = {**ENV, **_probe_env(probe), "SCRAPEJOBS_RESULTS_DIR": str(tmp_path / "results")}
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT"):
        env[name] = ""
    svc, port = _start(services, env)
    _, token, _ = make_tenant()
    job_id = _post_job(port, token, target.url("/bytes/10"))
    wait_all_final([job_id], timeout=60)
    assert Job.objects.get(id=job_id).status == JobStatus.SUCCEEDED
    assert Job.objects.get(id=job_id).trace_context is None

    # No process set up tracing: nothing of the tracing SDK, the exporters, the propagators or
    # the instrumentations was imported. (redis-py 8 imports the OpenTelemetry metrics SDK on its
    # own when it is installed, for its opt-in metrics, which nothing here turns on; those
    # modules are not ours to keep out, and cost nothing per command unless enabled.)
    imported = {line.split()[1] for line in probe.read_text().splitlines()} if probe.exists() else set()
    assert imported, "the probe saw nothing: it is not working"
    assert not {m for m in imported if m.startswith(TRACING_MODULES)}, sorted(imported)


def test_a_receipt_carries_a_trace_context_only_when_it_has_one() -> None:
    plain = AttemptFinished(job_id="j", attempt=1, outcome="succeeded", finished_at=1.0, duration_ms=5)
    assert len(json.loads(receipt_encode(plain))) == 12  # the first layout, byte for byte
    traced = AttemptFinished(
        job_id="j",
        attempt=1,
        outcome="succeeded",
        finished_at=1.0,
        duration_ms=5,
        trace_context="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
    )
    wire = json.loads(receipt_encode(traced))
    assert wire[12:] == [None, None, traced.trace_context]  # appended at the end
    assert receipt_decode(receipt_encode(traced)).trace_context == traced.trace_context
    assert receipt_decode(receipt_encode(plain)).trace_context is None


@pytest.mark.django_db
def test_intakes_insert_leaves_the_trace_column_out_unless_the_request_has_a_trace(
    make_tenant: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tracing off: the INSERT is the statement it was before tracing existed (no column, no
    value); on, the request's traceparent goes in the same one INSERT."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from apps.jobs import intake

    tenant, _, _ = make_tenant()
    with CaptureQueriesContext(connection) as off:
        plain, _ = intake.job_create(tenant_id=tenant.id, url="http://127.0.0.1:9/a", domain="127.0.0.1")
    inserts = [q["sql"] for q in off.captured_queries if q["sql"].startswith("INSERT")]
    assert len(inserts) == 1 and "trace_context" not in inserts[0]
    assert Job.objects.get(id=plain.id).trace_context is None

    traceparent = "00-" + "c" * 32 + "-" + "d" * 16 + "-01"
    monkeypatch.setattr(intake, "traceparent_current", lambda: traceparent)
    with CaptureQueriesContext(connection) as on:
        traced, _ = intake.job_create(tenant_id=tenant.id, url="http://127.0.0.1:9/b", domain="127.0.0.1")
    inserts = [q["sql"] for q in on.captured_queries if q["sql"].startswith("INSERT")]
    assert len(inserts) == 1 and "trace_context" in inserts[0]
    assert len(on.captured_queries) == len(off.captured_queries)
    assert Job.objects.get(id=traced.id).trace_context == traceparent
