"""The fetcher against real local servers: limits, redirects, classification, the address guard."""

import hashlib
import socket
import time
from email.utils import formatdate

import pytest
from django.test import override_settings

from apps.outbound import addresses, connections
from apps.scraping.errors import FetchError, parse_retry_after
from apps.scraping.fetch import FetchRequest, fetch_open
from apps.scraping.fetched import FetchLimits
from tests.scraping.servers import extra_server
from tests.support.target import body_for

LIMITS = FetchLimits(connect_timeout_s=5, max_bytes=1_000_000, max_redirects=5, user_agent="scrapejobs-test")

# Each hop reads its host's domain policy for the egress proxy (FR-28), through the policy cache.
pytestmark = pytest.mark.django_db


def _get(url, *, limits=LIMITS, **kw):
    """(status, body, content_type) of a successful fetch; raises FetchError otherwise."""
    with fetch_open(request=FetchRequest(method=kw.pop("method", "GET"), url=url, **kw), limits=limits) as f:
        return f.status, b"".join(f.chunks()), f.content_type


def _error(url, **kw) -> FetchError:
    with pytest.raises(FetchError) as info:
        _get(url, **kw)
    return info.value


def test_a_body_is_fetched_byte_for_byte(target):
    status, body, ctype = _get(target.url("/bytes/300000"))
    assert status == 200 and ctype == "application/octet-stream"
    assert hashlib.sha256(body).digest() == hashlib.sha256(body_for(300000)).digest()


def test_post_sends_the_body_and_headers_and_a_user_agent(target):
    _status, body, _ = _get(target.url("/echo"), method="POST", body="hello", headers={"X-Thing": "1"})
    assert b'"body": "hello"' in body and b'"X-Thing": "1"' in body and b"scrapejobs-test" in body


@pytest.mark.parametrize("code", [400, 401, 403, 404, 410, 422, 501])
def test_a_client_error_is_a_permanent_failure(target, code):
    err = _error(target.url(f"/status/{code}"))
    assert (err.error_class, err.permanent, err.http_status) == (f"http_{code}", True, code)


@pytest.mark.parametrize("code", [408, 429, 500, 502, 503, 504])
def test_a_server_error_or_throttling_is_a_temporary_failure(target, code):
    err = _error(target.url(f"/status/{code}"))
    assert (err.error_class, err.permanent, err.http_status) == (f"http_{code}", False, code)


def test_retry_after_is_reported_with_a_429(target):
    err = _error(target.url("/retry-after/k?fail=1&after=7"))
    assert err.error_class == "http_429" and err.retry_after_s == 7.0


def test_retry_after_accepts_seconds_and_http_dates_and_is_capped():
    now = 1_800_000_000.0
    assert parse_retry_after("120", now=now) == 120.0
    assert parse_retry_after(formatdate(now + 90, usegmt=True), now=now) == pytest.approx(90, abs=1)
    assert parse_retry_after(formatdate(now - 90, usegmt=True), now=now) == 0.0
    assert parse_retry_after("99999999", now=now) == 86400.0
    assert parse_retry_after("soon", now=now) is None
    assert parse_retry_after(None) is None


def test_redirects_are_followed_up_to_the_limit(target):
    assert _get(target.url("/redirect/5"))[1] == b"landed"
    err = _error(target.url("/redirect/6"))
    assert (err.error_class, err.permanent) == ("too_many_redirects", True)


@pytest.mark.parametrize("code,method,body", [(303, "GET", ""), (302, "GET", ""), (307, "POST", "payload")])
def test_a_redirect_after_a_post_keeps_or_drops_the_method_as_browsers_do(target, code, method, body):
    with extra_server() as srv:
        url = f"http://127.0.0.1:{srv.port}/to?code={code}&url={target.url('/echo')}"
        echoed = _get(url, method="POST", body="payload")[1]
    assert f'"method": "{method}"'.encode() in echoed and f'"body": "{body}"'.encode() in echoed


def test_credentials_are_not_sent_to_another_origin_after_a_redirect(target):
    with extra_server() as srv:
        url = f"http://127.0.0.1:{srv.port}/to?url={target.url('/echo')}"
        echoed = _get(url, headers={"Authorization": "Bearer secret", "X-Keep": "yes"})[1]
    assert b"secret" not in echoed and b"X-Keep" in echoed


def test_a_read_timeout_is_a_temporary_timeout(target):
    started = time.monotonic()
    err = _error(target.url("/slow?delay=5"), timeout_s=0.5)
    assert (err.error_class, err.permanent) == ("timeout", False)
    # time is the subject: a read timeout of 0.5 s stops the fetch
    # within 3 s, where the target answers after 5 s
    assert time.monotonic() - started < 3


def test_a_drip_feed_cannot_outlast_the_overall_deadline(target):
    # Each byte arrives well within a read timeout; only the overall deadline can stop this.
    started = time.monotonic()
    err = _error(target.url("/drip?n=100&delay=0.05"), timeout_s=1)
    assert err.error_class == "timeout"
    # time is the subject: an overall deadline of 1 s stops the fetch within 2.5 s, where the drip lasts 5 s
    assert time.monotonic() - started < 2.5


def test_a_body_announced_larger_than_the_limit_is_refused_up_front(target):
    limits = FetchLimits(connect_timeout_s=5, max_bytes=1000, max_redirects=5, user_agent="t")
    err = _error(target.url("/bytes/5000"), limits=limits)
    assert (err.error_class, err.permanent) == ("body_too_large", True)


def test_a_streamed_body_is_cut_when_it_passes_the_limit():
    limits = FetchLimits(
        connect_timeout_s=5, max_bytes=10_000, max_redirects=5, user_agent="t", chunk_size=1024
    )
    with extra_server() as srv:
        assert len(_get(f"http://127.0.0.1:{srv.port}/chunked?n=10000", limits=limits)[1]) == 10_000
        err = _error(f"http://127.0.0.1:{srv.port}/chunked?n=10001", limits=limits)
    assert (err.error_class, err.permanent) == ("body_too_large", True)


def test_a_refused_connection_is_a_temporary_connection_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    err = _error(f"http://127.0.0.1:{port}/")
    assert (err.error_class, err.permanent) == ("connection_error", False)


def test_https_to_a_plain_http_server_is_a_permanent_tls_error(target):
    err = _error(target.url("/bytes/10").replace("http://", "https://"))
    assert (err.error_class, err.permanent) == ("tls_error", True)


def test_a_name_that_does_not_resolve_is_a_temporary_dns_error(monkeypatch):
    def no_such_name(host, port):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(addresses, "system_resolve", no_such_name)
    err = _error("http://nowhere.test/")
    assert (err.error_class, err.permanent) == ("dns_error", False)


# --- The address guard on the real connect path ---------------------------------------------


@override_settings(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=False)
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::ffff:127.0.0.1]"])
def test_a_loopback_target_is_refused_before_any_request_is_sent(target, host):
    url = target.url("/bytes/10").replace("127.0.0.1", host)
    err = _error(url)
    assert (err.error_class, err.permanent) == ("address_refused", True)
    assert target.requests_for("/bytes") == []


@override_settings(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=False)
def test_a_name_resolving_to_loopback_is_refused(target, monkeypatch):
    monkeypatch.setattr(
        addresses, "system_resolve", lambda host, port: [(socket.AF_INET, ("127.0.0.1", port))]
    )
    port = target.server_address[1]
    assert _error(f"http://innocent.example:{port}/bytes/10").error_class == "address_refused"
    assert target.requests_for("/bytes") == []


def test_the_connected_peer_is_checked_even_if_resolution_was_fooled(target, monkeypatch):
    # Stand-in for a DNS answer that changed between the check and the connect: the candidate
    # list says nothing is wrong, the socket's peer is what refuses.
    monkeypatch.setattr(
        connections, "resolve_allowed", lambda host, port, **_: [(socket.AF_INET, ("127.0.0.1", port))]
    )
    with override_settings(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=False):
        err = _error(target.url("/bytes/10"))
    assert err.error_class == "address_refused"
    assert target.requests_for("/bytes") == []


@override_settings(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=False)
def test_a_redirect_from_an_allowed_host_to_a_private_one_is_refused(target, monkeypatch):
    # Pretend 127.0.0.1 is a public address and 127.0.0.2 a private one; both are this machine.
    monkeypatch.setattr(addresses, "is_public_address", lambda ip: str(ip) == "127.0.0.1")
    names = {"public.test": "127.0.0.1", "private.test": "127.0.0.2"}
    monkeypatch.setattr(
        addresses, "system_resolve", lambda host, port: [(socket.AF_INET, (names[host], port))]
    )
    with extra_server() as srv:
        assert _get(
            f"http://public.test:{srv.port}/to?url=http://public.test:{target.server_address[1]}/bytes/3"
        )[1] == (body_for(3))
        err = _error(
            f"http://public.test:{srv.port}/to?url=http://private.test:{target.server_address[1]}/bytes/4"
        )
        assert srv.paths == ["/to", "/to"]
    assert err.error_class == "address_refused"
    assert [r[1] for r in target.requests_for("/bytes")] == ["/bytes/3"]


def test_a_connection_pooled_while_private_targets_were_allowed_is_not_reused_once_they_are_not(target):
    with override_settings(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=True):
        assert _get(target.url("/bytes/10"))[0] == 200
    with override_settings(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=False):
        assert _error(target.url("/bytes/10")).error_class == "address_refused"
    assert len(target.requests_for("/bytes")) == 1
