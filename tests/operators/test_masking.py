"""Credentials stay out of what operators and logs see: a job's credential
headers and its body are masked on its admin page, credential values are masked in log lines,
and a signed result link never reaches the web server's access log."""

from __future__ import annotations

import io
import logging
import logging.config
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any, cast

import pytest
from django.conf import settings
from django.test import Client

from apps.jobs.intake import job_create
from apps.tenants.services import tenant_create
from tests.support.net import free_port
from tests.support.procs import wait_for

SECRETS = ("Bearer-s3cr3t-value", "sid-c00kie-value", "k3y-value", "t0ken-value", "pr0xy-value", "hunter2")
HEADERS = {
    "Authorization": "Bearer-s3cr3t-value",
    "Cookie": "sid-c00kie-value",
    "X-Api-Key": "k3y-value",
    "X-Auth-Token": "t0ken-value",
    "Proxy-Authorization": "pr0xy-value",
    "Accept": "text/html",
    "X-Shop-Region": "eu-west",
}


@pytest.mark.django_db
def test_the_job_page_masks_credential_headers_and_the_body_and_shows_the_rest(admin_client: Client) -> None:
    tenant = tenant_create(name="shop").tenant
    job, _ = job_create(
        tenant_id=tenant.pk,
        url="https://shop.example/login",
        domain="shop.example",
        method="POST",
        headers=HEADERS,
        body="user=ann&password=hunter2",
    )
    html = admin_client.get(f"/admin/jobs/job/{job.id}/change/").content.decode()
    for secret in SECRETS:
        assert secret not in html
    assert "Authorization: ********" in html and "X-Auth-Token: ********" in html
    assert "Accept: text/html" in html and "X-Shop-Region: eu-west" in html
    assert "25 bytes, hidden" in html


def project_logging() -> dict[str, Any]:
    return cast(dict[str, Any], settings.LOGGING)


@pytest.fixture
def configured_log() -> Iterator[io.StringIO]:
    """The project's LOGGING (settings.base), its console handler writing into a buffer."""
    out = io.StringIO()
    config = {**project_logging(), "handlers": {"console": {**project_logging()["handlers"]["console"]}}}
    config["handlers"]["console"]["stream"] = out
    logging.config.dictConfig(config)
    try:
        yield out
    finally:
        logging.config.dictConfig(project_logging())


def test_credential_values_are_masked_in_log_lines(configured_log: io.StringIO) -> None:
    log = logging.getLogger("apps.some.library")
    log.warning("sending %s", HEADERS)
    log.warning(
        "GET https://shop.example/feed?token=t0ken-value&page=2 with Authorization: Bearer-s3cr3t-value"
    )
    text = configured_log.getvalue()
    for secret in SECRETS[:5]:
        assert secret not in text
    assert "'Accept': 'text/html'" in text and "page=2" in text and "X-Api-Key" in text


@pytest.mark.e2e
def test_a_signed_result_link_never_reaches_the_access_log(services: object) -> None:
    port = free_port()
    web = services().start("web", port=port, workers=1)  # type: ignore[operator]
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: _answers(f"{base}/healthz"), 60, what="the web server")
    _answers(f"{base}/results/SIGNEDTOKENabc123.payload:sig")
    _answers(f"{base}/api/v1/jobs?cursor=QUERYSECRET42")
    wait_for(lambda: "GET /api/v1/jobs" in web.tail(400), 10, what=f"the access lines in {web.tail(400)!r}")
    log = web.tail(400)
    assert "SIGNEDTOKENabc123" not in log and "QUERYSECRET42" not in log
    assert "/results/<link>" in log and "/api/v1/jobs?<query>" in log


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=5).close()
    except urllib.error.HTTPError:
        return True  # an answer, if not a 2xx
    except OSError:
        return False
    return True


@pytest.mark.parametrize("unit", ["a", "x-", "HTTP"])
def test_masking_a_long_run_without_a_separator_is_linear(unit: str) -> None:
    """A request path or a reason phrase of one long word (no separator) is masked in time linear
    in its length: ten times the text costs less than forty times the time, where a quadratic
    masking costs a hundred (the least of five timings of each size: the suite runs four processes
    on two cores, and a timing of the large text taken while another test held the CPU once came
    out at 20.3 times; the figures themselves are make bench BENCH=hostile's)."""
    from apps.admin_mixins import error_readable
    from apps.runtime.logs import secrets_masked

    def least(text: str) -> float:
        timings = []
        for _ in range(5):
            started = time.perf_counter()
            secrets_masked(text)
            error_readable(text)
            timings.append(time.perf_counter() - started)
        return min(timings)

    small, large = unit * (100_000 // len(unit)), unit * (1_000_000 // len(unit))
    assert least(large) < 40 * least(small)
