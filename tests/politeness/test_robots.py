"""robots.txt (RFC 9309): the rules, the one shared copy per origin, and what
a job sees through the worker's real path: a disallowed URL fails ``robots_disallowed`` with no
request to it; a robots.txt answering 5xx defers the job; 4xx allows everything; the operator's
switches per tenant and per domain policy."""

from __future__ import annotations

import threading
import time

import pytest

from apps.jobs.models import Attempt, Job, JobStatus
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.politeness.models import DomainPolicy
from apps.politeness.robots import RobotsAnswer, robots_local_cache_clear, robots_rules_get
from apps.politeness.robots_rules import robots_parse
from apps.politeness.selectors import domain_limits_cache_clear, domain_state_get
from apps.scraping.attempt import job_run_attempt
from tests.e2e.fault_support import submit, wait_all_final
from tests.support.procs import wait_for

ROBOTS = """
# a comment
User-agent: otherbot
Disallow: /

User-agent: *
Disallow: /private
Allow: /private/open
Disallow: /*.pdf$
Disallow: /search?
Crawl-delay: 0.5

User-agent: ScrapeJobs
User-agent: friendbot
Disallow: /tmp/
Allow: /tmp/keep$
Disallow: /%7Ehome
"""


@pytest.mark.parametrize(
    ("product", "path", "allowed"),
    [
        ("scrapejobs", "/tmp/x", False),  # our own group, matched case-insensitively
        ("scrapejobs", "/tmp/keep", True),  # the longer (allow) rule wins
        ("scrapejobs", "/tmp/keep/more", False),  # $ anchors the end
        ("scrapejobs", "/private", True),  # our group replaces *: its rules do not apply
        ("scrapejobs", "/~home/a", False),  # unreserved characters compare decoded
        ("scrapejobs", "/robots.txt", True),
        ("anybot", "/private/x", False),
        ("anybot", "/private/open/x", True),  # longest match: the allow is longer
        ("anybot", "/doc/a.pdf", False),  # * and $
        ("anybot", "/doc/a.pdf?x=1", True),
        ("anybot", "/search?q=1", False),
        ("anybot", "/searching", True),
        ("otherbot", "/anything", False),
    ],
)
def test_the_longest_matching_rule_of_our_group_decides(product: str, path: str, allowed: bool) -> None:
    assert robots_parse(ROBOTS, product=product).allows(path) is allowed


def test_a_tie_between_allow_and_disallow_goes_to_allow_and_an_empty_disallow_allows_all() -> None:
    rules = robots_parse("User-agent: *\nDisallow: /page\nAllow: /page\n", product="scrapejobs")
    assert rules.allows("/page")
    assert robots_parse("User-agent: *\nDisallow:\n", product="scrapejobs").allows("/x")
    assert robots_parse(ROBOTS, product="anybot").crawl_delay_s == 0.5


@pytest.mark.django_db
def test_forty_threads_asking_at_once_fetch_the_file_once(settings) -> None:
    """Single flight: whoever sets the origin's lock fetches; the rest wait for its copy in Redis
    (each thread stands for a worker: the local copy is cleared for every call)."""
    settings.SCRAPEJOBS_ROBOTS_TTL_S = 60
    fetches: list[float] = []
    barrier = threading.Barrier(40)
    results: list[bool] = []

    def fetch() -> RobotsAnswer:
        fetches.append(time.time())
        # time is the subject: a slow robots.txt fetch, so that the other threads wait for its copy
        time.sleep(0.3)
        return RobotsAnswer(status=200, text="User-agent: *\nDisallow: /no\n")

    def ask() -> None:
        barrier.wait()
        robots_local_cache_clear()
        rules = robots_rules_get(origin="http://shop.example:80", host="shop.example", fetch=fetch, wait_s=5)
        results.append(rules.allows("/no"))

    threads = [threading.Thread(target=ask) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(fetches) == 1
    assert results == [False] * 40


# ---- through the worker's real path, in this process: job_run_attempt and the writer's fold ----


@pytest.fixture
def obeying(settings):
    settings.SCRAPEJOBS_ROBOTS_OBEY = True
    domain_limits_cache_clear()
    robots_local_cache_clear()
    yield settings
    domain_limits_cache_clear()
    robots_local_cache_clear()


def published(tenant, url: str) -> Job:
    job = submit(tenant, url)
    Job.objects.filter(id=job.id).update(published_at=job.created_at)
    return job


def run(job: Job) -> Job:
    receipt = job_run_attempt(job_id=job.id, worker="w:1:1")
    assert receipt is not None
    attempts_apply_finished([receipt])
    job.refresh_from_db()
    return job


def error_class(job: Job) -> str | None:
    return (job.last_error or {}).get("class")


@pytest.mark.django_db
def test_a_disallowed_url_fails_for_good_without_a_request_to_it(obeying, make_tenant, target) -> None:
    target.robots = (200, "User-agent: *\nDisallow: /bytes/\n")
    tenant = make_tenant()[0]
    job = run(published(tenant, target.url("/bytes/10")))
    assert (job.status, job.attempts, error_class(job)) == (JobStatus.FAILED, 1, "robots_disallowed")
    assert target.requests_for("/bytes/") == []
    assert len(target.requests_for("/robots.txt")) == 1
    allowed = run(published(tenant, target.url("/status/200")))
    assert allowed.status == JobStatus.SUCCEEDED
    assert len(target.requests_for("/robots.txt")) == 1  # cached, not fetched again


@pytest.mark.django_db
def test_a_redirect_into_a_disallowed_path_is_not_followed(obeying, make_tenant, target) -> None:
    target.robots = (200, "User-agent: *\nDisallow: /redirect/0\n")
    job = run(published(make_tenant()[0], target.url("/redirect/2")))
    assert (job.status, error_class(job)) == (JobStatus.FAILED, "robots_disallowed")
    assert [p for _, p, *_ in target.requests_for("/redirect/")] == ["/redirect/2", "/redirect/1"]


@pytest.mark.django_db
def test_a_robots_file_answering_404_allows_everything(obeying, make_tenant, target) -> None:
    job = run(published(make_tenant()[0], target.url("/bytes/10")))
    assert job.status == JobStatus.SUCCEEDED
    assert len(target.requests_for("/robots.txt")) == 1


@pytest.mark.django_db
def test_a_robots_file_answering_503_defers_the_job_and_pauses_its_origin_only(
    obeying, make_tenant, target
) -> None:
    """RFC 9309 2.3.1.3: a 5xx disallows everything for a while; the job is retried later (a
    temporary failure with the pause as its Retry-After), not failed. The pause is the origin's
    (its cached copy): the next job of that origin is not sent, nor is the file asked again, while
    the host's domain is not paused (NFR-23: its other ports are other origins)."""
    obeying.SCRAPEJOBS_ROBOTS_UNAVAILABLE_S = 30
    target.robots = (503, "down")
    tenant = make_tenant()[0]
    job = run(published(tenant, target.url("/bytes/10")))
    assert (job.status, error_class(job)) == (JobStatus.QUEUED, "robots_unavailable")
    assert job.not_before is not None
    # time is the subject: a deferral's length: the 30 s robots-unavailable pause, not an immediate retry
    assert (job.not_before - job.updated_at).total_seconds() > 25
    again = run(published(tenant, target.url("/bytes/11")))
    assert (again.status, error_class(again)) == (JobStatus.QUEUED, "robots_unavailable")
    assert target.requests_for("/bytes/") == []
    assert len(target.requests_for("/robots.txt")) == 1
    assert domain_state_get(domain="127.0.0.1").cooldown_s == 0


@pytest.mark.django_db
def test_a_tenant_or_a_policy_switched_off_by_an_operator_ignores_robots_txt(
    obeying, make_tenant, target
) -> None:
    target.robots = (200, "User-agent: *\nDisallow: /\n")
    ignoring, _, _ = make_tenant()
    ignoring.obey_robots = False
    ignoring.save()
    assert run(published(ignoring, target.url("/bytes/1"))).status == JobStatus.SUCCEEDED

    obeying_tenant = make_tenant()[0]
    assert error_class(run(published(obeying_tenant, target.url("/bytes/2")))) == "robots_disallowed"
    DomainPolicy.objects.create(
        domain="127.0.0.1", requests_per_second=1000, burst=1000, max_concurrency=100, obey_robots=False
    )
    domain_limits_cache_clear()
    assert run(published(obeying_tenant, target.url("/bytes/3"))).status == JobStatus.SUCCEEDED
    assert [p for _, p, *_ in target.requests_for("/bytes/")] == ["/bytes/1", "/bytes/3"]


@pytest.mark.django_db
def test_a_crawl_delay_caps_the_domains_rate(obeying, make_tenant, target) -> None:
    target.robots = (200, "User-agent: *\nCrawl-delay: 2\n")
    run(published(make_tenant()[0], target.url("/bytes/1")))
    assert domain_state_get(domain="127.0.0.1").crawl_delay_s == 2


# ---- real processes: two workers, the control component, beat ----


@pytest.mark.e2e
def test_two_worker_processes_fetch_the_file_once_per_ttl_and_never_request_a_disallowed_path(
    services, make_tenant, target, tmp_path
) -> None:
    """Issue 11, done when: a disallow fails the job with ``robots_disallowed`` and no request to
    the path; the file is fetched once per TTL whatever the number of workers (two processes of
    eight threads here, forty jobs at once; then again once after the TTL)."""
    target.robots = (200, "User-agent: *\nDisallow: /status/\n")
    svc = services(
        SCRAPEJOBS_ROBOTS_OBEY="true",
        SCRAPEJOBS_ROBOTS_TTL_S="5",
        SCRAPEJOBS_PUBLISH_INTERVAL_S="0.25",
        SCRAPEJOBS_RESULTS_DIR=str(tmp_path / "results"),
    )
    svc.start("control")
    svc.start("beat")
    workers = [svc.start("worker", concurrency=8, name=name) for name in ("a", "b")]
    # Both consuming before the jobs go out: one started late on a loaded machine (four test
    # processes) and the other had run all 30 by then.
    wait_for(lambda: all(" ready." in w.tail(200) for w in workers), 90, what="both workers ready")
    tenant = make_tenant()[0]
    allowed = [submit(tenant, target.url(f"/bytes/{100 + i}?delay=0.2")).id for i in range(30)]
    disallowed = [submit(tenant, target.url(f"/status/200?n={i}")).id for i in range(10)]
    wait_all_final(allowed + disallowed, timeout=60)

    rows = dict(Job.objects.filter(id__in=allowed + disallowed).values_list("id", "status"))
    assert [rows[i] for i in allowed] == [JobStatus.SUCCEEDED] * 30
    failed = Job.objects.filter(id__in=disallowed)
    assert (
        sorted((j.status, j.attempts, error_class(j)) for j in failed)
        == [(JobStatus.FAILED, 1, "robots_disallowed")] * 10
    )
    assert target.requests_for("/status/") == []
    took = set(Attempt.objects.filter(job_id__in=allowed).values_list("worker", flat=True))
    assert {w.split("@")[0] for w in took} == {"a", "b"}, took  # both processes took jobs
    fetched = [t for t, *_ in target.requests_for("/robots.txt")]
    assert len(fetched) == 1

    # Past the TTL the next jobs fetch it again, once.
    # time is the subject: the robots.txt copy's 5 s TTL runs out
    time.sleep(max(0.0, fetched[0] + 5.5 - time.time()))
    later = [submit(tenant, target.url(f"/bytes/{200 + i}")).id for i in range(10)]
    wait_all_final(later, timeout=60)
    assert len(target.requests_for("/robots.txt")) == 2


@pytest.mark.parametrize(
    ("written", "honoured"),
    [("inf", 60.0), ("1e14", 60.0), ("59.5", 59.5), ("nan", None), ("-3", None), ("x", None)],
)
def test_a_crawl_delay_is_clamped_to_a_minute_and_nonsense_is_none(written, honoured) -> None:
    """A file saying "inf" would set the domain's rate to 0 for every tenant (docs/limits.md)."""
    assert (
        robots_parse(f"User-agent: *\nCrawl-delay: {written}\n", product="anybot").crawl_delay_s == honoured
    )


def test_sitemap_lines_are_kept_whatever_group_they_sit_in_each_once_and_bounded() -> None:
    text = (
        "Sitemap: http://h.example/a.xml\nUser-agent: otherbot\nDisallow: /\n"
        "SITEMAP: http://h.example/b.xml.gz # a comment\nUser-agent: *\nsitemap: http://h.example/a.xml\n"
    )
    assert robots_parse(text, product="scrapejobs").sitemaps == (
        "http://h.example/a.xml",
        "http://h.example/b.xml.gz",
    )
    many = "".join(f"Sitemap: http://h.example/{i}.xml\n" for i in range(80))
    assert len(robots_parse(many, product="scrapejobs").sitemaps) == 50


@pytest.mark.parametrize(
    ("line", "ours"),
    [
        ("scrapejobs", True),
        ("ScrapeJobs/1.0", True),  # the product token before "/", any case
        ("scrapejobs/2.3 (+https://scrapejobs.example/bot)", True),
        ("SCRAPEJOBS (compatible)", True),
        ("scrapejobs-extra", False),  # another product
        ("scrapejobsbot/1.0", False),
        ("otherbot/1.0 scrapejobs", False),  # only the line's first token counts
    ],
)
def test_a_group_naming_our_product_token_with_a_version_applies_to_us(line: str, ours: bool) -> None:
    text = f"User-agent: *\nDisallow: /star\n\nUser-agent: {line}\nDisallow: /ours\n"
    rules = robots_parse(text, product="scrapejobs")
    assert rules.allows("/star") is ours
    assert rules.allows("/ours") is not ours
