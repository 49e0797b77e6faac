"""The service's logs: structured (JSON, or readable text for development),
every line of a job's attempt carrying its job id, tenant, domain and attempt, a failed scrape
naming its job and URL, housekeeping that did nothing saying nothing, and Flower behind a
password outside this machine."""

from __future__ import annotations

import io
import json
import logging
import logging.config
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from base64 import b64encode
from collections.abc import Iterator
from typing import Any, cast

import pytest
from django.conf import settings

from apps.jobs.intake import job_create
from apps.jobs.models import Job
from apps.runtime.logs import JobContextFilter, job_log_context, job_log_context_claimed
from scrapejobs import processes
from tests.support.procs import ROOT, Proc, service_env, wait_for


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def json_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


@pytest.mark.e2e
def test_a_failed_scrape_logs_one_json_line_naming_its_job_url_tenant_domain_and_attempt(
    services: Any, make_tenant: Any
) -> None:
    tenant = make_tenant()[0]
    s = services(SCRAPEJOBS_LOG_FORMAT="json", SCRAPEJOBS_LOG_LEVEL="INFO")
    s.start("control")
    s.start("beat")
    worker = s.start("worker", concurrency=2)
    url = f"http://127.0.0.1:{closed_port()}/feed"
    job, _ = job_create(tenant_id=tenant.id, url=url, domain="127.0.0.1", max_attempts=1)
    wait_for(lambda: Job.objects.get(pk=job.pk).status == "failed", 60, what="the job to fail")

    def the_line() -> dict[str, Any] | None:
        about = [e for e in json_lines(worker.tail(2000)) if e.get("job_id") == str(job.id)]
        return next((e for e in about if url in e["message"]), None)

    line = wait_for(the_line, 10, what="the failure line")
    assert isinstance(line, dict)
    assert line["level"] == "WARNING" and str(job.id) in line["message"]
    assert line["tenant"] == str(tenant.id) and line["domain"] == "127.0.0.1" and line["attempt"] == 1
    assert "connection_error" in line["message"] and "HTTPConnection" not in line["message"]
    # Every line of the worker is JSON once Celery's banner (printed, not logged) is over.
    logged = [ln for ln in worker.tail(2000).splitlines() if ln.startswith(("{", "[20"))]
    assert logged and all(ln.startswith("{") for ln in logged)


def project_logging() -> dict[str, Any]:
    return cast(dict[str, Any], settings.LOGGING)


@pytest.fixture
def text_log() -> Iterator[io.StringIO]:
    """The project's LOGGING in its development format, its console handler into a buffer."""
    out = io.StringIO()
    console = {**project_logging()["handlers"]["console"], "formatter": "text", "stream": out}
    config: Any = {**project_logging(), "handlers": {"console": console}}
    logging.config.dictConfig(config)
    try:
        yield out
    finally:
        logging.config.dictConfig(project_logging())


def test_the_text_format_is_one_readable_line_with_the_jobs_fields(text_log: io.StringIO) -> None:
    log = logging.getLogger("apps.scraping.attempt")
    log.warning("outside any job")
    with job_log_context(job_id="0192-job", domain="shop.example"):
        job_log_context_claimed(tenant_id="t-1", attempt=2, url="https://shop.example/a")
        log.warning("storing the result failed")
    log.warning("after the job")
    lines = text_log.getvalue().splitlines()
    assert lines[0].endswith("WARNING apps.scraping.attempt outside any job")
    assert lines[1].endswith(
        "storing the result failed [job_id=0192-job tenant=t-1 domain=shop.example attempt=2]"
    )
    assert lines[2].endswith("after the job")


def test_an_unknown_log_format_stops_the_process_with_a_clear_message() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "settings.test", "SCRAPEJOBS_LOG_FORMAT": "xml"}
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "SCRAPEJOBS_LOG_FORMAT must be one of json, text" in done.stderr


@pytest.mark.e2e
def test_idle_housekeeping_prints_nothing(services: Any) -> None:
    s = services(SCRAPEJOBS_LOG_LEVEL="INFO", SCRAPEJOBS_LOG_FORMAT="text")
    writer = s.start("control")
    beat = s.start("beat")
    wait_for(lambda: " ready." in writer.tail(200), 60, what="the writer")
    wait_for(lambda: "beat: Starting" in beat.tail(200), 60, what="beat")
    before = len(writer.tail(5000).splitlines()) + len(beat.tail(5000).splitlines())
    time.sleep(4)  # about 30 housekeeping ticks (writer flush, publisher, sweeper, webhooks)
    after = len(writer.tail(5000).splitlines()) + len(beat.tail(5000).splitlines())
    assert "Sending due task" not in beat.tail(5000)
    assert after - before <= 2, writer.tail(40) + beat.tail(40)


def test_flower_on_a_public_address_refuses_to_start_without_a_password() -> None:
    with pytest.raises(SystemExit, match="FLOWER_BASIC_AUTH"):
        processes.from_env("flower", {"FLOWER_ADDRESS": "0.0.0.0"})
    assert "flower" in processes.from_env("flower", {"FLOWER_ADDRESS": "0.0.0.0", "FLOWER_BASIC_AUTH": "a:b"})
    assert "flower" in processes.from_env("flower", {"FLOWER_ADDRESS": "127.0.0.1"})


@pytest.mark.e2e
@pytest.mark.django_db
def test_flower_with_a_password_answers_401_without_it_and_200_with_it() -> None:
    port = closed_port()
    env = service_env(FLOWER_BASIC_AUTH="ops:s3cret", FLOWER_ADDRESS="0.0.0.0", FLOWER_PORT=str(port))
    proc = Proc("flower", processes.from_env("flower", env), env).start()
    try:
        wait_for(lambda: _status(f"http://127.0.0.1:{port}/") is not None, 60, what="flower")
        assert _status(f"http://127.0.0.1:{port}/") == 401
        assert _status(f"http://127.0.0.1:{port}/", auth="ops:s3cret") == 200
    finally:
        proc.stop()


def _status(url: str, auth: str | None = None) -> int | None:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def test_the_jobs_url_field_is_masked_as_the_message_is(text_log: io.StringIO) -> None:
    """Every line logged during a job carries its URL: a credential in its query is masked there
    too, not only in the message."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    log = logging.getLogger("apps.scraping.attempt")
    keep = Keep()
    keep.addFilter(JobContextFilter())
    log.addHandler(keep)
    try:
        with job_log_context(job_id="0192-job", domain="shop.example"):
            job_log_context_claimed(
                tenant_id="t-1", attempt=1, url="https://shop.example/a?api_key=s3cr3t&page=2"
            )
            log.warning("fetching")
    finally:
        log.removeHandler(keep)
    (record,) = records
    assert "s3cr3t" not in record.url and "page=2" in record.url  # type: ignore[attr-defined]
