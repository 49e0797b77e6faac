"""The line at a busy domain's gate (NFR-9, NFR-10 at the gate; docs/design/politeness.md, "The
line at a busy domain"): once a domain's permits are what limits the work, they go in the same
weighted-fair order as the pool's slots, the priorities by their weights (6:3:1) and the tenants
of a priority by theirs, and a refused job keeps its place. Real Redis, real policies; the
concurrency cap is the bottleneck here (one slot), so that which job the next permit goes to is
decided by the line alone, not by the clock."""

from __future__ import annotations

from collections import Counter

import pytest

from apps.politeness import limiter
from apps.politeness.keys import domain_keys
from apps.politeness.limiter import LineShare, domain_permit_acquire, domain_permit_release, domain_token_try
from apps.politeness.models import DomainPolicy
from apps.politeness.selectors import domain_limits_cache_clear, domain_state_get
from apps.redis_clients import state_redis

pytestmark = pytest.mark.django_db

DOMAIN = "line.example"


@pytest.fixture(autouse=True)
def one_slot() -> None:
    """A domain whose tokens never run out and that takes one request at a time."""
    DomainPolicy.objects.create(domain=DOMAIN, requests_per_second=1000, burst=1000, max_concurrency=1)
    domain_limits_cache_clear()


def ask(job: str, share: LineShare, *, holder: str | None = None):
    return domain_permit_acquire(domain=DOMAIN, holder=holder or job, ticket=job, slot_ttl_s=30, share=share)


def serve(waiting: dict[str, LineShare], n: int) -> list[str]:
    """Hand out the domain's one slot ``n`` times: each round every waiting job asks (in no
    particular order: the line decides), the one granted is served and gives the slot back."""
    served = []
    for _ in range(n):
        granted = [job for job in sorted(waiting) if ask(job, waiting[job]).granted]
        assert len(granted) == 1, granted  # one slot: exactly one job is due
        job = granted[0]
        served.append(job)
        del waiting[job]
        domain_permit_release(domain=DOMAIN, holder=job)
    return served


def test_a_high_job_arriving_behind_a_crawlers_line_is_next():
    """The seed's case: a crawler's normal jobs wait at the gate; a shop's high job that arrives
    after them takes the next permit (its line's weight, 6 to 3), not a place at the back."""
    assert ask("busy", LineShare("normal", "crawler")).granted  # holds the slot
    crawler = {f"c{i:02}": LineShare("normal", "crawler") for i in range(20)}
    for job, share in crawler.items():
        refused = ask(job, share)
        assert not refused.granted
    shop = ask("shop", LineShare("high", "shop"))
    assert (shop.granted, shop.place, shop.reason) == (False, 0, "concurrency")
    # The crawler's first job is now second, and says why it waits.
    second = ask("c00", crawler["c00"])
    assert (second.place, second.reason) == (1, "queue")
    domain_permit_release(domain=DOMAIN, holder="busy")
    assert not ask("c00", crawler["c00"]).granted  # not its turn, though the slot is free
    assert ask("shop", LineShare("high", "shop")).granted


def test_the_permits_go_six_three_one_across_the_priorities_and_low_is_never_starved():
    assert ask("busy", LineShare()).granted
    waiting = {f"{p[0]}{i:02}": LineShare(p, "t") for p in ("high", "normal", "low") for i in range(30)}
    for job, share in waiting.items():
        assert not ask(job, share).granted
    domain_permit_release(domain=DOMAIN, holder="busy")
    served = serve(waiting, 40)
    for k in range(0, 40, 10):  # every ten permits while all three lines wait: 6, 3, 1
        assert Counter(job[0] for job in served[k : k + 10]) == {"h": 6, "n": 3, "l": 1}, served
    # And within a line, first come, first served.
    assert [j for j in served if j[0] == "h"] == [f"h{i:02}" for i in range(24)]


def test_tenants_of_one_priority_share_the_permits_by_weight_whoever_came_first():
    """A crawler's 20 jobs wait; then a shop's (weight 1) and an analyst's (weight 2) arrive, in
    the same priority: from then on the permits alternate by weight (within one job per round),
    the crawler's earlier arrival buys it no more than its share."""
    assert ask("busy", LineShare()).granted
    waiting = {f"c{i:02}": LineShare("normal", "crawler", 1) for i in range(20)}
    for job, share in waiting.items():
        ask(job, share)
    late = {f"s{i:02}": LineShare("normal", "shop", 1) for i in range(6)}
    late |= {f"a{i:02}": LineShare("normal", "analyst", 2) for i in range(12)}
    for job, share in late.items():
        ask(job, share)
    waiting |= late
    domain_permit_release(domain=DOMAIN, holder="busy")
    served = serve(waiting, 24)
    for k in range(0, 24, 4):  # each round of four permits: crawler 1, shop 1, analyst 2
        assert Counter(job[0] for job in served[k : k + 4]) == {"c": 1, "s": 1, "a": 2}, served


def test_a_refused_job_keeps_its_place_and_one_that_never_comes_back_lapses():
    assert ask("busy", LineShare()).granted
    places = [ask(f"j{i}", LineShare()).place for i in range(3)]
    assert places == [0, 1, 2]
    assert ask("j1", LineShare()).place == 1  # asking again keeps the place, not the back
    assert ask("newcomer", LineShare()).place == 3
    assert domain_state_get(domain=DOMAIN).in_line == {"high": 0, "normal": 4, "low": 0}
    # A place is kept until LINE_HOLD_S after its job was told to come back; past that, a job
    # that did not come back (cancelled, its worker died) no longer holds anyone up.
    keys = domain_keys(DOMAIN)
    lapses = state_redis().zrange(keys.lapses, 0, -1, withscores=True)
    assert {m for m, _ in lapses} == {"2\t\tj0", "2\t\tj1", "2\t\tj2", "2\t\tnewcomer"}
    now = float(state_redis().time()[0])
    assert all(now + limiter.LINE_HOLD_S - 1 < at <= now + limiter.LINE_HOLD_S + 1 for _, at in lapses)
    state_redis().zadd(keys.lapses, {f"2\t\tj{i}": 0 for i in range(3)})  # as if that time had passed
    assert ask("newcomer", LineShare()).place == 0


def test_the_line_leaves_nothing_behind_once_it_is_empty_and_tokens_are_taken_without_it():
    assert ask("busy", LineShare()).granted
    assert not ask("a", LineShare("high", "t")).granted
    assert not domain_token_try(domain=DOMAIN)  # a page's asset never jumps a waiting job
    domain_permit_release(domain=DOMAIN, holder="busy")
    assert ask("a", LineShare("high", "t")).granted
    keys = domain_keys(DOMAIN)
    r = state_redis()
    assert r.exists(*keys.lines, keys.lapses, keys.fair) == 0
    assert r.hget(keys.state, "queued") == "0"
    assert domain_token_try(domain=DOMAIN)


def test_a_message_without_a_share_stands_as_a_normal_job_of_weight_one():
    assert LineShare.from_message(None, None, None) == LineShare("normal", "", 1)
    assert LineShare.from_message("urgent", "t", "x") == LineShare("normal", "t", 1)
    assert LineShare.from_message("high", "t", 3) == LineShare("high", "t", 3)
    assert LineShare.from_message("low", "t", 0) == LineShare("low", "t", 1)
