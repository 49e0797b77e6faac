"""Egress through an HTTP CONNECT proxy (FR-28, docs/egress.md), against a proxy started on
loopback (tests/support/connect_proxy.py) that counts its tunnels: target fetches and robots.txt
through SCRAPEJOBS_EGRESS_PROXY, the domain policy's override, webhooks through their own proxy;
the guard judging the target before any CONNECT, which names the vetted address while the Host
header keeps the name; credentials masked; a refusing or absent proxy a temporary proxy_error left
out of the target's adaptive rate; a 407 a permanent proxy_auth shown on /readyz."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.test import Client, override_settings

from apps.jobs.intake import job_create
from apps.jobs.models import Attempt, Job
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.outbound.proxies import egress_proxy_parse
from apps.politeness.keys import domain_keys
from apps.politeness.models import DomainPolicy
from apps.redis_clients import state_redis
from apps.scraping.attempt import job_run_attempt
from apps.webhooks.sending import webhook_post
from scrapejobs.processes import ROOT
from tests.support.connect_proxy import ConnectProxy

PASSWORD = "s3cr:t/pw"  # characters a URL must escape


@pytest.fixture
def proxy() -> Iterator[ConnectProxy]:
    p = ConnectProxy().start()
    yield p
    p.stop()


def _run(tenant, url: str) -> tuple[Job, Attempt]:
    job = job_create(tenant_id=tenant.id, url=url, domain="localhost")[0]
    receipt = job_run_attempt(job_id=job.id, worker="w:1:1")
    assert receipt is not None
    attempts_apply_finished([receipt])
    job.refresh_from_db()
    return job, Attempt.objects.get(job=job, number=job.attempts)


def _by_name(target, path: str) -> str:
    return f"http://localhost:{target.server_address[1]}{path}"


@pytest.mark.django_db
def test_a_fetch_and_its_robots_txt_are_tunnelled_to_the_vetted_address_and_keep_the_name(
    tenant, target, proxy
):
    target.robots = (200, "User-agent: *\nAllow: /\n")
    with override_settings(SCRAPEJOBS_EGRESS_PROXY=proxy.url(), SCRAPEJOBS_ROBOTS_OBEY=True):
        job, attempt = _run(tenant, _by_name(target, "/bytes/100"))
    assert job.status == "succeeded", attempt.error
    port = target.server_address[1]
    # One tunnel carried robots.txt and then the page (kept alive: same origin, same proxy), to
    # an address the guard resolved, never the name (a proxy given the name would resolve it
    # past the guard).
    assert proxy.tunnels == 1
    assert set(proxy.connects) <= {f"127.0.0.1:{port}", f"[::1]:{port}"}
    assert f"127.0.0.1:{port}" in proxy.connects
    (page,) = target.requests_for("/bytes/100")
    assert page[3]["Host"] == f"localhost:{port}"  # the name, through the tunnel
    assert len(target.requests_for("/robots.txt")) == 1


@pytest.mark.django_db
def test_robots_txt_alone_goes_through_the_proxy(tenant, target, proxy):
    target.robots = (200, "User-agent: *\nDisallow: /private\n")
    with override_settings(SCRAPEJOBS_EGRESS_PROXY=proxy.url(), SCRAPEJOBS_ROBOTS_OBEY=True):
        job, attempt = _run(tenant, _by_name(target, "/private/page"))
    assert attempt.error_class == "robots_disallowed"
    assert proxy.tunnels == 1 and len(target.requests_for("/robots.txt")) == 1


@pytest.mark.django_db
def test_credentials_in_the_url_are_sent_to_the_proxy_and_shown_masked(tenant, target):
    proxy = ConnectProxy(username="agent", password=PASSWORD).start()
    try:
        with override_settings(SCRAPEJOBS_EGRESS_PROXY=proxy.url()):
            job, attempt = _run(tenant, _by_name(target, "/bytes/10"))
    finally:
        proxy.stop()
    assert job.status == "succeeded", attempt.error
    assert proxy.tunnels >= 1 and all(a and a.startswith("Basic ") for a in proxy.authorizations)
    parsed = egress_proxy_parse(proxy.url())
    assert parsed is not None and parsed.password == PASSWORD
    for shown in (repr(parsed), parsed.masked):  # the operator's log and the admin
        assert PASSWORD not in shown and "s3cr" not in shown and "agent:***@127.0.0.1" in shown
    assert str(parsed) == "the egress proxy"  # what error texts say: no user, no host


@pytest.mark.django_db
def test_a_proxy_refusing_the_credentials_fails_the_job_with_proxy_auth_shown_on_readyz(tenant, target):
    proxy = ConnectProxy(username="agent", password=PASSWORD).start()
    try:
        assert Client().get("/readyz").json().get("warnings") is None
        with override_settings(SCRAPEJOBS_EGRESS_PROXY=proxy.url(password="wrong")):
            job, attempt = _run(tenant, _by_name(target, "/bytes/10"))
    finally:
        proxy.stop()
    assert job.status == "failed"  # permanent: no retry cures a wrong password
    assert (attempt.outcome, attempt.error_class) == ("failed_permanent", "proxy_auth")
    assert target.requests_for("/bytes/10") == []
    ready = Client().get("/readyz")
    assert ready.status_code == 200  # intake does not depend on the proxy (NFR-1)
    warning = ready.json()["warnings"]["egress_proxy"]
    assert "proxy_auth" in warning and "407" in warning
    # Neither the tenant's job nor the unauthenticated /readyz names the proxy's user or host.
    for shown in (attempt.error, job.last_error["message"], warning):
        assert "wrong" not in shown and "agent" not in shown and f":{proxy.port}" not in shown, shown


@pytest.mark.django_db
@pytest.mark.parametrize("how", ["refuses", "is_down"])
def test_a_failing_proxy_is_a_temporary_proxy_error_left_out_of_the_targets_rate(tenant, target, how):
    if how == "refuses":
        proxy = ConnectProxy(refuse=True).start()
        url = proxy.url()
    else:
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{s.getsockname()[1]}"
    outcomes = domain_keys("localhost").outcomes
    with override_settings(SCRAPEJOBS_EGRESS_PROXY=url, SCRAPEJOBS_DOMAIN_ADAPTIVE=True):
        job, attempt = _run(tenant, _by_name(target, "/bytes/10"))
    assert (attempt.outcome, attempt.error_class) == ("failed_temporary", "proxy_error"), attempt.error
    assert job.status == "queued" and job.not_before is not None  # a retry, an attempt spent
    assert target.requests == []
    assert not state_redis().exists(outcomes)  # the target's adaptive window saw nothing
    # Whereas an answer of the target itself is counted there (the check above can fail).
    with override_settings(SCRAPEJOBS_DOMAIN_ADAPTIVE=True):
        job, attempt = _run(tenant, _by_name(target, "/bytes/10"))
    assert job.status == "succeeded" and state_redis().exists(outcomes)


@pytest.mark.django_db
def test_the_guard_judges_the_target_before_any_tunnel(tenant, target, proxy):
    with override_settings(SCRAPEJOBS_EGRESS_PROXY=proxy.url(), SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=False):
        job, attempt = _run(tenant, _by_name(target, "/bytes/10"))
    assert attempt.error_class == "address_refused" and job.status == "failed"
    assert proxy.connects == []  # the proxy was never asked


@pytest.mark.django_db
def test_a_domain_policy_names_its_own_proxy_or_none(tenant, target, proxy):
    other = ConnectProxy().start()
    try:
        with override_settings(SCRAPEJOBS_EGRESS_PROXY=proxy.url()):
            policy = DomainPolicy.objects.create(
                domain="localhost", requests_per_second=100, burst=100, max_concurrency=10,
                obey_robots=False, egress_proxy="none",
            )  # fmt: skip
            job, _ = _run(tenant, _by_name(target, "/bytes/10"))
            assert job.status == "succeeded" and proxy.connects == []  # direct
            policy.egress_proxy = other.url()
            policy.save()
            from apps.politeness.selectors import domain_limits_cache_clear

            domain_limits_cache_clear()
            job, _ = _run(tenant, _by_name(target, "/bytes/10"))
            assert job.status == "succeeded"
            assert other.tunnels == 1 and proxy.connects == []
    finally:
        other.stop()


@pytest.mark.django_db
def test_webhooks_follow_their_own_proxy_not_the_targets(target, proxy):
    targets_proxy = ConnectProxy().start()
    try:
        with override_settings(
            SCRAPEJOBS_WEBHOOK_EGRESS_PROXY=proxy.url(), SCRAPEJOBS_EGRESS_PROXY=targets_proxy.url()
        ):
            outcome = webhook_post(url=_by_name(target, "/status/200"), body=b"{}", headers={})
    finally:
        targets_proxy.stop()
    assert outcome.ok, outcome.error
    assert proxy.tunnels == 1 and targets_proxy.connects == []
    with override_settings(SCRAPEJOBS_WEBHOOK_EGRESS_PROXY=ConnectProxy(refuse=True).start().url()):
        refused = webhook_post(url=_by_name(target, "/status/200"), body=b"{}", headers={})
    assert not refused.ok and not refused.permanent and "403" in (refused.error or "")


@pytest.mark.parametrize(
    "value", ["ftp://proxy:21", "http://", "http://proxy:notaport", "http://agent:hunter2@proxy:3128/path"]
)
def test_a_bad_proxy_setting_stops_the_process_without_printing_its_password(value):
    env = {
        "PATH": "/usr/bin:/bin",
        "SCRAPEJOBS_EGRESS_PROXY": value,
        "DJANGO_SETTINGS_MODULE": "settings.base",
    }
    done = subprocess.run(
        [sys.executable, "-c", "import settings.base"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode != 0
    assert "SCRAPEJOBS_EGRESS_PROXY" in done.stderr and "hunter2" not in done.stderr


def test_the_policy_form_shows_the_proxy_masked_and_keeps_it_when_sent_back_unchanged(db):
    from apps.politeness.admin import DomainPolicyForm

    stored = f"http://agent:{PASSWORD.replace(':', '%3A').replace('/', '%2F')}@127.0.0.1:3128"
    policy = DomainPolicy.objects.create(
        domain="shop.example", requests_per_second=1, burst=1, max_concurrency=1, egress_proxy=stored
    )
    form = DomainPolicyForm(instance=policy)
    shown = form.initial["egress_proxy"]
    assert shown == "http://agent:***@127.0.0.1:3128" and "s3cr" not in form.as_p()
    data = {**{k: getattr(policy, k) for k in form.fields}, "egress_proxy": shown}
    sent = DomainPolicyForm(data=data, instance=policy)
    assert sent.is_valid(), sent.errors
    assert sent.save().egress_proxy == stored
    bad = DomainPolicyForm(data={**data, "egress_proxy": "socks5://127.0.0.1:1080"}, instance=policy)
    assert not bad.is_valid() and "egress_proxy" in bad.errors


@pytest.fixture
def tls(tmp_path, monkeypatch):
    from tests.support.tls import local_tls

    made = local_tls(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(made.ca_file))  # the default trust store, for this test
    return made


@pytest.fixture
def https_target(tls):
    from tests.support.target import TargetServer

    server = TargetServer()
    server.socket = tls.server_context().wrap_socket(server.socket, server_side=True)
    server.start()
    yield server
    server.stop()


@pytest.mark.django_db
@pytest.mark.parametrize("proxy_tls", [False, True], ids=["http_proxy", "https_proxy"])
def test_an_https_target_is_verified_by_its_name_through_the_tunnel(tenant, https_target, tls, proxy_tls):
    """CONNECT names 127.0.0.1, yet the target's certificate is checked against the name
    (localhost); through an https:// proxy that TLS runs inside the proxy's own TLS."""
    proxy = ConnectProxy(tls=tls.server_context() if proxy_tls else None).start()
    port = https_target.server_address[1]
    try:
        with override_settings(SCRAPEJOBS_EGRESS_PROXY=proxy.url()):
            job, attempt = _run(tenant, f"https://localhost:{port}/bytes/50")
    finally:
        proxy.stop()
    assert job.status == "succeeded", attempt.error
    assert proxy.tunnels == 1 and proxy.connects[0] in (f"127.0.0.1:{port}", f"[::1]:{port}")
    (page,) = https_target.requests_for("/bytes/50")
    assert page[3]["Host"] == f"localhost:{port}"
