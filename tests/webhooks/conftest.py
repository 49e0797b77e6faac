from __future__ import annotations

import pytest


@pytest.fixture
def fast_retries(settings):
    settings.SCRAPEJOBS_WEBHOOK_RETRY_SCHEDULE_S = [0.05, 0.05, 0.05]
    settings.SCRAPEJOBS_WEBHOOK_TIMEOUT_S = 2.0
    return settings
