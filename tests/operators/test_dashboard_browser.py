"""The dashboard in a real browser: headless Debian Chromium driven by
Selenium logs into the admin on a real server, follows the admin index's link to the dashboard,
switches to the 7-day window of a generated week-long ledger, and checks that every chart drew
(points in its Chart.js instance, pixels on its canvas). The screenshot is kept as an artifact.

Nothing is installed at run time: without /usr/bin/chromium and /usr/bin/chromedriver the test
skips and says so (``make test`` installs them first where it can: the Makefile's ``browser``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from apps.operators.rollup_runner import rollup_run
from tests.support.big_ledger import ledger_build

pytestmark = pytest.mark.e2e  # starts a browser: the whole suite's, not the fast loop's

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACT = Path(__file__).resolve().parents[2] / ".run" / "test-artifacts" / "dashboard.png"
CHART_COUNT = 9

# What each chart drew: data points in its Chart.js instance, elements laid out for its first
# dataset, and non-transparent pixels on its canvas.
DRAWN_JS = """
const out = {};
for (const [id, chart] of Object.entries(window.scrapejobsCharts || {})) {
  const points = chart.data.datasets.reduce((n, d) => n + d.data.filter(v => v !== null).length, 0);
  const canvas = chart.canvas;
  const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let painted = 0;
  for (let i = 3; i < pixels.length; i += 4) { if (pixels[i]) { painted++; } }
  out[id] = {points: points, elements: chart.getDatasetMeta(0).data.length, painted: painted};
}
return out;
"""


def _browser():  # type: ignore[no-untyped-def]
    from selenium import webdriver

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1500,2300",
    ):
        options.add_argument(flag)
    return options


@pytest.fixture
def browser(tmp_path: Path):  # type: ignore[no-untyped-def]
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.skip(
            f"no browser: {CHROMIUM} or {CHROMEDRIVER} is not installed "
            "(`make test` installs Debian's chromium and chromium-driver where apt-get runs as root)"
        )
    from selenium import webdriver

    options = _browser()
    options.add_argument(f"--user-data-dir={tmp_path / 'profile'}")
    driver = webdriver.Chrome(
        options=options, service=webdriver.ChromeService(executable_path=str(CHROMEDRIVER))
    )
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.mark.django_db(transaction=True)
def test_a_staff_user_sees_every_chart_drawn_in_a_real_browser(browser, live_server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    ledger_build(jobs=20_000, attempts_per_job=3, tenants=4, domains=30)
    rollup_run(settle_s=0)
    User.objects.create_user("ops", password="correct horse", is_staff=True)

    browser.get(f"{live_server.url}/admin/login/?next=/admin/")
    browser.find_element(By.NAME, "username").send_keys("ops")
    browser.find_element(By.NAME, "password").send_keys("correct horse")
    browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()

    def present(by: str, value: str):  # a click that navigates returns before the next page is in
        return WebDriverWait(browser, 30).until(lambda d: (d.find_elements(by, value) or [None])[0])

    present(By.CSS_SELECTOR, "#operators-dashboard-link a").click()
    present(By.LINK_TEXT, "7d").click()
    WebDriverWait(browser, 30).until(
        lambda d: d.execute_script("return Object.keys(window.scrapejobsCharts || {}).length") == CHART_COUNT
    )

    drawn = browser.execute_script(DRAWN_JS)
    ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    browser.find_element(By.ID, "dashboard").screenshot(str(ARTIFACT))
    print(f"dashboard screenshot: {ARTIFACT}")

    assert "window=7d" in browser.current_url
    assert browser.find_elements(By.CSS_SELECTOR, "#dashboard .errornote") == []
    assert len(drawn) == CHART_COUNT
    for chart_id, seen in drawn.items():
        assert seen["points"] > 0, (chart_id, seen)
        assert seen["elements"] > 0, (chart_id, seen)
        assert seen["painted"] > 1000, (chart_id, seen)
    assert shutil.os.path.getsize(ARTIFACT) > 10_000
