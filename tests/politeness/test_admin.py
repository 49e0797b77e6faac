"""Operators edit domain policies in the Django admin, as a superuser through the test client
(NFR-5 (politeness), FR-9, NFR-5, FR-9, FR-14); workers see an edit within the policy cache time."""

from __future__ import annotations

import time

import pytest
from django.test import Client

from apps.politeness.limiter import DomainDecision, domain_outcome_record, domain_permit_acquire
from apps.politeness.models import DomainPolicy
from apps.politeness.selectors import POLICY_CACHE_S, domain_limits_get
from tests.support.procs import wait_for

pytestmark = pytest.mark.django_db

POLICIES = "/admin/politeness/domainpolicy/"


def form(**overrides: str) -> dict[str, str]:
    return {
        "domain": "shop.example",
        "requests_per_second": "0.5",
        "burst": "2",
        "max_concurrency": "1",
        "grouping": "host",
        "obey_robots": "on",
        "note": "",
    } | overrides


def test_an_operator_adds_a_policy_and_the_domain_is_stored_as_jobs_store_it(admin_client: Client) -> None:
    response = admin_client.post(
        POLICIES + "add/", form(domain=" Shop.Example. ", note="asked us to slow down")
    )
    assert response.status_code == 302, response.content
    policy = DomainPolicy.objects.get()
    assert (policy.domain, policy.requests_per_second, policy.burst, policy.max_concurrency) == (
        "shop.example",
        0.5,
        2,
        1,
    )
    listing = admin_client.get(POLICIES).content.decode()
    assert "shop.example" in listing and "asked us to slow down" in listing


def test_an_operator_edit_reaches_the_workers_within_the_cache_time(admin_client: Client) -> None:
    admin_client.post(POLICIES + "add/", form(max_concurrency="1", requests_per_second="1000", burst="1000"))
    policy = DomainPolicy.objects.get()
    assert domain_limits_get(domain="shop.example").max_concurrency == 1  # a worker cached it

    def ask(holder: str) -> DomainDecision:
        return domain_permit_acquire(domain="shop.example", holder=holder, ticket=holder, slot_ttl_s=30)

    assert ask("a").granted and ask("b").reason == "concurrency"

    edited = time.monotonic()
    response = admin_client.post(
        f"{POLICIES}{policy.pk}/change/", form(max_concurrency="3", requests_per_second="1000", burst="1000")
    )
    assert response.status_code == 302, response.content
    assert DomainPolicy.objects.get().max_concurrency == 3
    # Within the cache time the change shows up without anyone clearing anything.
    wait_for(
        lambda: domain_limits_get(domain="shop.example").max_concurrency == 3,
        timeout=POLICY_CACHE_S + 0.5 - (time.monotonic() - edited),
        what="the edit to reach the worker within the policy cache time",
    )
    assert ask("b").granted and ask("c").granted and ask("d").reason == "concurrency"


def test_the_change_page_shows_the_live_state_of_the_domain(admin_client: Client) -> None:
    policy = DomainPolicy.objects.create(
        domain="shop.example", requests_per_second=1, burst=3, max_concurrency=2
    )
    domain_permit_acquire(domain="shop.example", holder="h", ticket="h", slot_ttl_s=30)
    page = admin_client.get(f"{POLICIES}{policy.pk}/change/").content.decode()
    assert "1 in flight" in page and "tokens 2.0" in page


def test_the_list_and_the_page_show_the_adaptive_rate_in_force(admin_client: Client, settings) -> None:
    """after a run of 503s the admin shows the lowered rate, next to the
    policy's; a registrable-domain policy shows the state its hosts share."""
    settings.SCRAPEJOBS_DOMAIN_ADAPTIVE = True
    policy = DomainPolicy.objects.create(
        domain="shop.example", requests_per_second=8, burst=8, max_concurrency=2, grouping="registrable"
    )
    for _ in range(20):
        domain_outcome_record(domain="www.shop.example", http_status=503, retry_after_s=None)
    listing = admin_client.get(POLICIES).content.decode()
    assert "4/s" in listing
    page = admin_client.get(f"{POLICIES}{policy.pk}/change/").content.decode()
    assert "rate now 4/s (policy 8/s)" in page


@pytest.mark.parametrize(
    "bad",
    [
        {"requests_per_second": "0"},
        {"burst": "0"},
        {"max_concurrency": "0"},
        {"domain": "https://shop.example/"},
        {"domain": "shop.example:8080"},
        {"min_requests_per_second": "1"},  # a floor above the policy's 0.5/s
        {"grouping": "by-path"},
    ],
)
def test_a_policy_that_could_never_let_a_request_through_or_match_a_job_is_refused(
    admin_client: Client, bad: dict[str, str]
) -> None:
    response = admin_client.post(POLICIES + "add/", form(**bad))
    assert response.status_code == 200  # the form again, with the error
    assert not DomainPolicy.objects.exists()


def test_the_admin_is_for_staff_only(client: Client) -> None:
    response = client.get(POLICIES)
    assert response.status_code == 302 and "/login/" in response["Location"]
