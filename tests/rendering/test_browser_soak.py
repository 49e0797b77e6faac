"""The browser soak in `make test` (NFR-31, docs/benchmarks.md): bench/browser_soak.py's soak on
200 pages, a fresh Chromium every 40 (five restart cycles), held to no growth past the second
cycle beyond ``GROWTH_LIMIT_PCT`` in the component's and Chromium's memory, the component's open
descriptors and Chromium's processes, and no Chromium process left once the pool is closed.
`make bench BENCH=browser-soak` runs it on 2,000 pages and draws the curve."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from bench.browser_soak import GROWTH_LIMIT_PCT, MEASURES, soak, soak_site

CHROMIUM = "/usr/bin/chromium"
PAGES = 200
PAGES_PER_BROWSER = 40
pytestmark = [
    pytest.mark.e2e,  # starts Chromium processes
    pytest.mark.skipif(
        not os.access(CHROMIUM, os.X_OK),
        reason=f"no {CHROMIUM}: `make test` installs Debian's chromium where it can (apt-get as root)",
    ),
]


@pytest.fixture
def soak_url() -> Iterator[str]:
    server, url = soak_site()
    yield url
    server.shutdown()
    server.server_close()


@pytest.mark.timeout(900)  # 200 renders: about 4.5 min at a load of 13 on 2 cores, past the suite's 300 s
@pytest.mark.django_db(transaction=True)  # the page's fetch threads read the domain policy
def test_two_hundred_pages_through_one_pool_grow_nothing_and_leave_no_chromium(soak_url, settings):
    settings.SCRAPEJOBS_BROWSER_EXECUTABLE = CHROMIUM
    result = soak(url=soak_url, pages=PAGES, pages_per_browser=PAGES_PER_BROWSER)
    assert result.launches == PAGES // PAGES_PER_BROWSER
    assert len(result.samples) == PAGES // PAGES_PER_BROWSER
    curve = "\n".join(str(s) for s in result.samples)
    for measure in MEASURES:
        growth = result.growth_pct(measure)
        assert growth is not None
        assert growth <= GROWTH_LIMIT_PCT, f"{measure} grew {growth:.1f} % after the second cycle:\n{curve}"
    assert result.chromium_left_behind == 0
