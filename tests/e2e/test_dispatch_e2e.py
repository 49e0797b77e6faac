"""Fair dispatch end to end (NFR-5): NFR-9 (priorities) with a real worker process, writer and
beat. One worker slot and a broker kept three messages deep: the order in which attempts start is
the order the publisher chose."""

from collections import Counter

import pytest

from apps.jobs.models import Attempt, Job
from tests.support.procs import wait_for

pytestmark = pytest.mark.e2e


def test_a_saturated_worker_starts_high_normal_and_low_work_six_three_one(services, api, target):
    """NFR-9 (priorities)."""
    for priority, n in (("low", 10), ("normal", 20), ("high", 30)):  # low is the oldest backlog
        for _ in range(n):
            response = api.post(
                "/api/v1/jobs", {"url": target.url("/bytes/64"), "priority": priority}, format="json"
            )
            assert response.status_code == 202, response.content

    services(SCRAPEJOBS_DISPATCH_DEPTH="3", SCRAPEJOBS_PUBLISH_INTERVAL_S="0.2").start_all(
        worker_concurrency=1
    )
    wait_for(lambda: Job.objects.filter(status="succeeded").count() == 60, 120, what="all 60 jobs to succeed")

    starts = list(Attempt.objects.order_by("started_at").values_list("job__priority", flat=True))
    assert len(starts) == 60
    first = Counter(starts[:30])  # 6:3:1 of 30 is 18, 9, 3
    assert 15 <= first["high"] <= 21 and 6 <= first["normal"] <= 12 and 1 <= first["low"] <= 5, first
    # Low never starves: it starts within the first ten, though it was submitted first and is the
    # smallest share.
    assert "low" in starts[:10], starts[:10]
