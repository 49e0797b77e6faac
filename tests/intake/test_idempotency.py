"""Idempotency-Key on POST /api/v1/jobs: FR-1 (submit), FR-1 to FR-7 "Rules every call keeps"."""

from __future__ import annotations

import json
import threading
import uuid

import pytest
from django.db import connection
from rest_framework.test import APIClient

from apps.jobs.models import Job

JOBS = "/api/v1/jobs"


def post(client, body, key=None):
    extra = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    raw = body if isinstance(body, str) else json.dumps(body)
    return client.post(JOBS, data=raw, content_type="application/json", **extra)


@pytest.mark.django_db
def test_the_same_key_and_body_give_back_the_same_job_marked_as_replayed(api):
    first = post(api, {"url": "http://a.example/", "priority": "high"}, key="k-1")
    again = post(api, {"url": "http://a.example/", "priority": "high"}, key="k-1")
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json()
    assert again["Location"] == first["Location"]
    assert again["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_key_order_and_spelled_out_defaults_do_not_change_the_fingerprint(api):
    first = post(api, '{"url": "http://a.example/", "priority": "low", "method": "GET"}', key="k")
    again = post(
        api, '{"max_attempts": 5, "priority": "low", "url": "http://a.example/", "timeout_s": 30}', key="k"
    )
    assert again.status_code == 202
    assert again.json()["id"] == first.json()["id"]
    assert again["Idempotent-Replayed"] == "true"


@pytest.mark.django_db
def test_the_same_key_with_another_body_is_a_422_and_creates_nothing(api):
    post(api, {"url": "http://a.example/"}, key="k")
    r = post(api, {"url": "http://a.example/other"}, key="k")
    assert r.status_code == 422
    assert r.json()["type"] == "idempotency_error"
    assert r.json()["code"] == "idempotency_key_reused"
    assert Job.objects.count() == 1


@pytest.mark.django_db
def test_keys_belong_to_one_tenant(make_tenant):
    _, _, one = make_tenant()
    _, _, two = make_tenant()
    a = post(one, {"url": "http://a.example/"}, key="shared")
    b = post(two, {"url": "http://a.example/other"}, key="shared")
    assert a.status_code == b.status_code == 202
    assert a.json()["id"] != b.json()["id"]
    assert "Idempotent-Replayed" not in b


@pytest.mark.django_db
def test_a_replay_shows_the_jobs_current_status(api):
    first = post(api, {"url": "http://a.example/"}, key="k")
    api.post(f"{JOBS}/{first.json()['id']}/cancel")
    again = post(api, {"url": "http://a.example/"}, key="k")
    assert again.status_code == 202
    assert again.json()["status"] == "cancelled"


@pytest.mark.django_db
@pytest.mark.parametrize("key", ["", "x" * 256, "tab\there"])
def test_a_key_that_is_empty_too_long_or_unprintable_is_a_400(api, key):
    r = post(api, {"url": "http://a.example/"}, key=key)
    assert r.status_code == 400
    assert "Idempotency-Key" in r.json()["fields"]
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_a_key_of_255_characters_is_accepted(api):
    assert post(api, {"url": "http://a.example/"}, key="k" * 255).status_code == 202


@pytest.mark.django_db
def test_an_invalid_body_with_a_key_does_not_burn_the_key(api):
    assert post(api, {"url": "ftp://a.example/"}, key="k").status_code == 400
    assert post(api, {"url": "http://a.example/"}, key="k").status_code == 202


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_with_one_key_create_exactly_one_job(make_tenant):
    _, token, _ = make_tenant()
    n = 16
    barrier = threading.Barrier(n)
    answers: list[tuple[int, str, str | None]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def submit() -> None:
        try:
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
            barrier.wait(timeout=10)
            r = post(client, {"url": "http://race.example/", "timeout_s": 7}, key="race-key")
            with lock:
                answers.append((r.status_code, r.json()["id"], r.get("Idempotent-Replayed")))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=submit) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert len(answers) == n
    assert {status for status, _, _ in answers} == {202}
    assert len({job_id for _, job_id, _ in answers}) == 1
    assert sorted(replayed or "" for _, _, replayed in answers) == [""] + ["true"] * (n - 1)
    assert Job.objects.filter(idempotency_key="race-key").count() == 1
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_retries_over_real_http_create_exactly_one_job(make_tenant, live_server):
    import requests

    _, token, _ = make_tenant()
    n = 16
    barrier = threading.Barrier(n)
    answers: list[tuple[int, str]] = []
    lock = threading.Lock()

    def submit() -> None:
        with requests.Session() as s:
            barrier.wait(timeout=10)
            r = s.post(
                f"{live_server.url}{JOBS}",
                json={"url": "http://race.example/"},
                headers={"Authorization": f"Bearer {token}", "Idempotency-Key": "http-race"},
                timeout=30,
            )
        with lock:
            answers.append((r.status_code, r.json()["id"]))

    threads = [threading.Thread(target=submit) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(answers) == n
    assert {code for code, _ in answers} == {202}
    assert len({job_id for _, job_id in answers}) == 1
    assert Job.objects.filter(idempotency_key="http-race").count() == 1


# --- Expiry (SCRAPEJOBS_IDEMPOTENCY_TTL_HOURS; NFR-7 "keys kept >= 24 h") ------


def _age(job_id: str, hours: float) -> None:
    """Move a job's creation back in time, as if it had been submitted ``hours`` ago."""
    from datetime import timedelta

    from django.utils import timezone

    Job.objects.filter(id=job_id).update(created_at=timezone.now() - timedelta(hours=hours))


def _http_post(base: str, token: str, body: dict, key: str):
    import requests

    return requests.post(
        f"{base}{JOBS}",
        json=body,
        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": key},
        timeout=30,
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("body_again", ["same", "other"], ids=["same-body", "another-body"])
def test_a_key_older_than_its_ttl_no_longer_replays_and_makes_a_new_job(make_tenant, live_server, body_again):
    _, token, _ = make_tenant()
    body = {"url": "http://a.example/"}
    later_body = body if body_again == "same" else {"url": "http://a.example/other"}
    first = _http_post(live_server.url, token, body, "k-old")
    assert first.status_code == 202
    _age(first.json()["id"], 24.1)  # the default TTL is 24 h

    again = _http_post(live_server.url, token, later_body, "k-old")
    assert again.status_code == 202, again.content
    assert "Idempotent-Replayed" not in again.headers
    assert again.json()["id"] != first.json()["id"]
    assert Job.objects.count() == 2
    # The new job holds the key now: a retry of it replays it.
    third = _http_post(live_server.url, token, later_body, "k-old")
    assert third.headers["Idempotent-Replayed"] == "true" and third.json()["id"] == again.json()["id"]
    assert Job.objects.count() == 2
    assert Job.objects.get(id=first.json()["id"]).idempotency_key is None  # the old job stays


@pytest.mark.django_db(transaction=True)
def test_concurrent_reuses_of_an_expired_key_create_exactly_one_new_job(make_tenant, live_server):
    _, token, _ = make_tenant()
    old = _http_post(live_server.url, token, {"url": "http://race.example/"}, "expired-race").json()["id"]
    _age(old, 25)
    n = 12
    barrier = threading.Barrier(n)
    answers: list[tuple[int, str]] = []
    lock = threading.Lock()

    def submit() -> None:
        barrier.wait(timeout=10)
        r = _http_post(live_server.url, token, {"url": "http://race.example/"}, "expired-race")
        with lock:
            answers.append((r.status_code, r.json()["id"]))

    threads = [threading.Thread(target=submit) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(answers) == n
    assert {code for code, _ in answers} == {202}
    (new,) = {job_id for _, job_id in answers}
    assert new != old
    assert Job.objects.count() == 2
    assert list(Job.objects.filter(idempotency_key="expired-race").values_list("id", flat=True)) == [
        uuid.UUID(new)
    ]


@pytest.mark.django_db
def test_a_key_younger_than_its_ttl_still_replays(api, settings):
    settings.SCRAPEJOBS_IDEMPOTENCY_TTL_HOURS = 48
    first = post(api, {"url": "http://a.example/"}, key="k-young")
    _age(first.json()["id"], 47)
    again = post(api, {"url": "http://a.example/"}, key="k-young")
    assert again["Idempotent-Replayed"] == "true" and again.json()["id"] == first.json()["id"]
    _age(first.json()["id"], 49)
    later = post(api, {"url": "http://a.example/"}, key="k-young")
    assert "Idempotent-Replayed" not in later and later.json()["id"] != first.json()["id"]


@pytest.mark.django_db
def test_the_clean_up_releases_only_the_keys_older_than_the_ttl(api, settings):
    from apps.scheduling.tasks import idempotency_keys_expire_task

    settings.SCRAPEJOBS_IDEMPOTENCY_TTL_HOURS = 30
    old = post(api, {"url": "http://a.example/1"}, key="old").json()["id"]
    young = post(api, {"url": "http://a.example/2"}, key="young").json()["id"]
    keyless = post(api, {"url": "http://a.example/3"}).json()["id"]
    _age(old, 31)
    _age(young, 29)
    _age(keyless, 31)
    assert idempotency_keys_expire_task() == 1
    assert Job.objects.get(id=old).idempotency_key is None
    assert Job.objects.get(id=young).idempotency_key == "young"
    assert idempotency_keys_expire_task() == 0
    # The old job is still there, only its key is gone.
    assert api.get(f"{JOBS}/{old}").status_code == 200
