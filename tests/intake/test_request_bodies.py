"""Request bodies over the limit, and bodies without a Content-Length.

NFR-1 (intake answers without a 5xx) and FR-1 to FR-7 ("Bad input is 400, 413 for a body
over the size limit, never 500, and creates nothing"); NFR-2 for the chunked submission that is
accepted. These go through Django's test client; tests/intake/test_request_bodies_e2e.py sends the
same requests to the real gunicorn over a socket.

A chunked request reaches Django the way gunicorn hands it over: no CONTENT_LENGTH,
HTTP_TRANSFER_ENCODING kept, the decoded body in wsgi.input and ``wsgi.input_terminated`` true.
"""

from __future__ import annotations

import io
import json

import pytest
from django.conf import settings
from django.test import override_settings

from apps.jobs.models import Job

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs"
TOO_LARGE = {
    "type": "invalid_request",
    "code": "payload_too_large",
    "detail": f"The request body is over {settings.SCRAPEJOBS_MAX_REQUEST_BYTES} bytes.",
}


def _five_mb_submission() -> bytes:
    return json.dumps({"url": "http://a.example", "method": "POST", "body": "x" * (5 << 20)}).encode()


class Stream(io.BytesIO):
    """wsgi.input that remembers how much the application read, and can break like a client that
    goes away in the middle of its body."""

    def __init__(self, data: bytes, *, broken: bool = False):
        super().__init__(data)
        self.asked, self.broken = 0, broken

    def read(self, size: int | None = -1, /) -> bytes:
        if self.broken:
            raise OSError("client gone")
        self.asked += len(data := super().read(size))
        return data


def chunked(client, path, data: bytes, *, terminated: bool = True, broken: bool = False, **extra):
    """The environ gunicorn builds for ``Transfer-Encoding: chunked``."""
    stream = Stream(data, broken=broken)
    environ = {
        "CONTENT_LENGTH": "",  # the test client always sets one: gunicorn sends none
        "HTTP_TRANSFER_ENCODING": "chunked",
        "wsgi.input": stream,
        **({"wsgi.input_terminated": True} if terminated else {}),
    }
    return client.generic(
        "POST", path, data=data, content_type="application/json", **environ, **extra
    ), stream


def test_django_refuses_to_buffer_more_than_the_api_accepts():
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE == settings.SCRAPEJOBS_MAX_REQUEST_BYTES


def test_a_5_mb_submission_is_a_413_with_the_error_body_and_creates_nothing(api):
    r = api.post(JOBS, data=_five_mb_submission(), content_type="application/json")
    assert r.status_code == 413, r.content[:500]
    assert r.json() == TOO_LARGE
    assert Job.objects.count() == 0


def test_a_cancel_with_a_body_over_the_limit_is_a_413_and_cancels_nothing(api):
    job_id = api.post(JOBS, data={"url": "http://a.example"}, format="json").json()["id"]
    r = api.post(f"{JOBS}/{job_id}/cancel", data=_five_mb_submission(), content_type="application/json")
    assert r.status_code == 413, r.content[:500]
    assert r.json() == TOO_LARGE
    assert Job.objects.get(id=job_id).status == "queued"


def test_a_small_chunked_submission_is_accepted(api):
    r, _ = chunked(api, JOBS, json.dumps({"url": "http://a.example/chunked"}).encode())
    assert r.status_code == 202, r.content
    assert Job.objects.get(id=r.json()["id"]).url == "http://a.example/chunked"


def test_a_small_chunked_submission_is_accepted_on_the_drf_path_too(api):
    # An Accept header other than */* or application/json takes DRF's path, not the lean one.
    r, _ = chunked(
        api, JOBS, json.dumps({"url": "http://a.example/chunked"}).encode(), HTTP_ACCEPT="text/html, */*"
    )
    assert r.status_code == 202, r.content
    assert Job.objects.get(id=r.json()["id"]).url == "http://a.example/chunked"


def test_a_chunked_body_over_the_limit_is_a_413_after_reading_one_byte_past_it(api):
    r, stream = chunked(api, JOBS, _five_mb_submission())
    assert r.status_code == 413, r.content[:500]
    assert r.json() == TOO_LARGE
    assert stream.asked == settings.SCRAPEJOBS_MAX_REQUEST_BYTES + 1
    assert Job.objects.count() == 0


@override_settings(SCRAPEJOBS_MAX_REQUEST_BYTES=2048)
def test_the_chunked_limit_follows_the_setting(api):
    r, stream = chunked(api, JOBS, json.dumps({"url": "http://a.example", "body": "x" * 3000}).encode())
    assert r.status_code == 413, r.content
    assert r.json()["detail"] == "The request body is over 2048 bytes."
    assert stream.asked == 2049


def test_a_chunked_body_the_server_does_not_terminate_is_a_411_and_is_not_read(api):
    """A server that passes chunked bodies through undecoded (not gunicorn) gives no end to read
    up to: reading could wait for ever, so the body is refused unread."""
    r, stream = chunked(api, JOBS, json.dumps({"url": "http://a.example"}).encode(), terminated=False)
    assert r.status_code == 411, r.content
    assert r.json() == {
        "type": "invalid_request",
        "code": "length_required",
        "detail": "A request body needs a Content-Length header here.",
    }
    assert stream.asked == 0
    assert Job.objects.count() == 0


def test_a_chunked_body_that_cannot_be_read_is_a_400(api):
    r, _ = chunked(api, JOBS, json.dumps({"url": "http://a.example"}).encode(), broken=True)
    assert r.status_code == 400, r.content
    assert r.json()["code"] == "parse_error"
    assert Job.objects.count() == 0


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=2048)
def test_djangos_own_refusal_of_a_body_is_a_413_not_a_500(api):
    """Should DATA_UPLOAD_MAX_MEMORY_SIZE ever be below the API's limit, the RequestDataTooBig
    that request.body raises in a DRF view is still the API's 413 (apps/api/errors.py)."""
    r = api.post(JOBS, data={"url": "http://a.example", "body": "x" * 3000}, format="json")
    assert r.status_code == 413, r.content
    assert r.json()["code"] == "payload_too_large"
    assert Job.objects.count() == 0
