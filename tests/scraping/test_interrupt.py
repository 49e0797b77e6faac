"""Stopping a fetch from another thread (FetchInterrupt), and keeping name resolution inside the
fetch's time limits. Real local servers and real sockets; only the DNS is stood in for."""

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from apps.outbound import addresses, connections
from apps.outbound.addresses import resolve_allowed
from apps.outbound.interrupt import FetchInterrupt
from apps.scraping.errors import FetchError
from apps.scraping.fetch import FetchRequest, fetch_open
from apps.scraping.fetched import FetchLimits
from tests.support.procs import wait_for

LIMITS = FetchLimits(connect_timeout_s=5, max_bytes=1_000_000, max_redirects=5, user_agent="scrapejobs-test")

# Each hop reads its host's domain policy for the egress proxy (FR-28), through the policy cache.
pytestmark = pytest.mark.django_db


class Stopped(Exception):
    """What the check of these tests raises once told to: the caller's reason for stopping."""


class Stopper:
    def __init__(self) -> None:
        self.interrupt = FetchInterrupt()
        self.reason = threading.Event()

    def check(self) -> None:
        if self.reason.is_set():
            raise Stopped

    def stop(self) -> None:
        self.reason.set()  # first: the fetch's check must see it when the read breaks off
        self.interrupt.fire()


def _fetch(url: str, *, check: Callable[[], None], interrupt: FetchInterrupt, timeout_s: float = 60) -> bytes:
    request = FetchRequest(method="GET", url=url, timeout_s=timeout_s)
    with fetch_open(request=request, limits=LIMITS, check=check, interrupt=interrupt) as fetched:
        return b"".join(fetched.chunks())


def _in_thread(fn: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """Run ``fn`` in a thread; the list gets its result or the exception it raised."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(fn())
        except BaseException as e:  # noqa: BLE001 - handed to the test
            outcome.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _stopped_within(thread: threading.Thread, seconds: float) -> float:
    asked = time.monotonic()
    thread.join(10)
    elapsed = time.monotonic() - asked
    # time is the subject: a stop within the caller's bound (1 s), where the
    # stuck fetch would go on for its whole timeout
    assert not thread.is_alive() and elapsed < seconds, f"the fetch took {elapsed:.2f}s to stop"
    return elapsed


def test_a_fetch_waiting_for_headers_stops_at_once_when_interrupted_and_reports_the_callers_reason(target):
    stopper = Stopper()
    thread, outcome = _in_thread(
        lambda: _fetch(target.url("/slow?delay=30"), check=stopper.check, interrupt=stopper.interrupt)
    )
    wait_for(lambda: target.requests_for("/slow"), 10, what="the request to reach the target")
    time.sleep(0.3)  # well inside the wait for headers
    stopper.stop()
    _stopped_within(thread, 1)
    assert isinstance(outcome[0], Stopped)


def test_an_interrupted_fetch_whose_check_gives_no_reason_fails_as_interrupted(target):
    interrupt = FetchInterrupt()
    thread, outcome = _in_thread(
        lambda: _fetch(target.url("/slow?delay=30"), check=lambda: None, interrupt=interrupt)
    )
    wait_for(lambda: target.requests_for("/slow"), 10, what="the request to reach the target")
    interrupt.fire()
    _stopped_within(thread, 1)
    err = outcome[0]
    assert isinstance(err, FetchError) and (err.error_class, err.permanent) == ("interrupted", False)


def test_a_body_read_waiting_for_the_next_byte_stops_at_once_when_interrupted(target):
    stopper = Stopper()
    # Ten bytes, five seconds apart: the fetch spends its time blocked inside a read.
    thread, outcome = _in_thread(
        lambda: _fetch(target.url("/drip?n=10&delay=5"), check=stopper.check, interrupt=stopper.interrupt)
    )
    wait_for(lambda: target.requests_for("/drip"), 10, what="the download to start")
    # time is the subject: the fetch is half a second into its 5 s wait for the next byte
    time.sleep(0.5)
    stopper.stop()
    _stopped_within(thread, 1)
    assert isinstance(outcome[0], Stopped)


def test_a_fetch_whose_interrupt_fired_before_it_started_never_reaches_the_target(target):
    interrupt = FetchInterrupt()
    interrupt.fire()
    with pytest.raises(FetchError) as info:
        _fetch(target.url("/bytes/10"), check=lambda: None, interrupt=interrupt)
    assert info.value.error_class == "interrupted"
    assert target.requests == []


def test_firing_after_a_fetch_ended_leaves_the_pooled_connection_to_whoever_uses_it_next(target):
    # The first fetch reads its body to the end, so its connection goes back to the pool kept
    # alive; the second fetch (another job) is then served on it, waiting for its headers.
    first = FetchInterrupt()
    assert _fetch(target.url("/bytes/10"), check=lambda: None, interrupt=first)
    thread, outcome = _in_thread(
        lambda: _fetch(target.url("/slow?delay=1"), check=lambda: None, interrupt=FetchInterrupt())
    )
    wait_for(lambda: target.requests_for("/slow"), 10, what="the second request to reach the target")
    first.fire()
    thread.join(10)
    assert outcome == [b"finally"]
    # One connection served both: otherwise this test would prove nothing.
    assert connections.pool_manager().connection_from_url(target.base_url).num_connections == 1


# --- Name resolution within the deadline ----------------------------------------------------


@pytest.fixture
def stuck_resolver(monkeypatch) -> Iterator[Callable[[str, int], list]]:
    """A resolver that answers only when the test ends (a DNS server that went silent)."""
    release = threading.Event()
    calls: list[str] = []

    def resolve(host: str, port: int) -> list:
        calls.append(host)
        release.wait(30)
        return [(socket.AF_INET, ("127.0.0.1", port))]

    monkeypatch.setattr(addresses, "system_resolve", resolve)
    yield resolve
    release.set()  # let the abandoned lookups finish


def test_a_resolution_that_outlasts_its_bound_is_a_temporary_resolution_failure(stuck_resolver):
    started = time.monotonic()
    with pytest.raises(socket.gaierror) as info:
        resolve_allowed("silent.test", 80, resolver=stuck_resolver, timeout_s=0.3)
    assert info.value.errno == socket.EAI_AGAIN
    # time is the subject: a resolution bound of 0.3 s: held at least
    # that long and given up well within a second
    assert 0.3 <= time.monotonic() - started < 1


def test_a_resolver_that_answers_in_time_is_used_as_before():
    got = resolve_allowed(
        "quick.test", 80, resolver=lambda h, p: [(socket.AF_INET, ("127.0.0.1", p))], timeout_s=5
    )
    assert got == [(socket.AF_INET, ("127.0.0.1", 80))]


def test_a_silent_resolver_fails_the_fetch_as_a_dns_error_within_the_connect_timeout(stuck_resolver):
    limits = FetchLimits(connect_timeout_s=0.5, max_bytes=1000, max_redirects=0, user_agent="t")
    started = time.monotonic()
    with pytest.raises(FetchError) as info:
        with fetch_open(
            request=FetchRequest(method="GET", url="http://silent.test/", timeout_s=60), limits=limits
        ):
            pass
    assert (info.value.error_class, info.value.permanent) == ("dns_error", False)
    # time is the subject: a stuck resolution gives up within 1.5 s, where the fetch's own timeout is 60 s
    assert time.monotonic() - started < 1.5


def test_a_silent_resolver_cannot_hold_a_fetch_past_the_jobs_deadline(stuck_resolver):
    limits = FetchLimits(connect_timeout_s=30, max_bytes=1000, max_redirects=0, user_agent="t")
    started = time.monotonic()
    with pytest.raises(FetchError) as info:
        with fetch_open(
            request=FetchRequest(method="GET", url="http://silent.test/", timeout_s=0.5), limits=limits
        ):
            pass
    assert (info.value.error_class, info.value.permanent) == ("dns_error", False)
    # time is the subject: a stuck resolution gives up within 1.5 s of a
    # 0.5 s timeout, not when the resolver would
    assert time.monotonic() - started < 1.5
