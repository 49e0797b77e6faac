"""POST /jobs's ``render`` and ``browser`` fields (FR-30): bounded, refused with their field
names, stored with defaults filled in, and part of the single-flight fetch key."""

from __future__ import annotations

import json

import pytest

from apps.jobs.models import Job
from apps.jobs.singleflight import job_fetch_decide

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/jobs"


def post(client, body):
    return client.post(JOBS, data=json.dumps(body), content_type="application/json")


def test_a_plain_job_is_render_none_and_keeps_no_browser_options(api):
    r = post(api, {"url": "https://example.com/"})
    assert r.status_code == 202, r.content
    job = Job.objects.get(id=r.json()["id"])
    assert (job.render, job.browser_options) == ("none", None)
    assert api.get(f"{JOBS}/{job.id}").json()["render"] == "none"


def test_a_rendered_job_is_stored_with_every_option_filled_in(api):
    r = post(api, {"url": "https://example.com/", "render": "browser"})
    assert r.status_code == 202, r.content
    job = Job.objects.get(id=r.json()["id"])
    assert job.render == "browser"
    assert job.browser_options == {
        "wait_until": "load",
        "wait_for_selector": None,
        "screenshot": False,
        "viewport": {"width": 1280, "height": 800},
        "block": [],
    }
    assert api.get(f"{JOBS}/{job.id}").json()["render"] == "browser"


def test_given_options_are_kept(api):
    options = {
        "wait_until": "networkidle",
        "wait_for_selector": "#price",
        "screenshot": True,
        "viewport": {"width": 800},
        "block": ["fonts", "images", "fonts"],
    }
    r = post(api, {"url": "https://example.com/", "render": "browser", "browser": options})
    assert r.status_code == 202, r.content
    job = Job.objects.get(id=r.json()["id"])
    assert job.browser_options == {
        "wait_until": "networkidle",
        "wait_for_selector": "#price",
        "screenshot": True,
        "viewport": {"width": 800, "height": 800},
        "block": ["fonts", "images"],
    }


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"render": "chrome"}, "render"),
        ({"render": True}, "render"),
        ({"browser": {"screenshot": True}}, "browser"),  # render is none
        ({"render": "none", "browser": {}}, "browser"),
        ({"render": "browser", "method": "POST", "body": "x"}, "render"),
        ({"render": "browser", "method": "HEAD"}, "render"),
        ({"render": "browser", "browser": "load"}, "browser"),
        ({"render": "browser", "browser": {"wait_until": "idle"}}, "browser.wait_until"),
        ({"render": "browser", "browser": {"wait_for_selector": "x" * 1025}}, "browser.wait_for_selector"),
        ({"render": "browser", "browser": {"wait_for_selector": "é" * 513}}, "browser.wait_for_selector"),
        ({"render": "browser", "browser": {"wait_for_selector": 5}}, "browser.wait_for_selector"),
        ({"render": "browser", "browser": {"screenshot": "yes"}}, "browser.screenshot"),
        ({"render": "browser", "browser": {"screenshot": 1}}, "browser.screenshot"),
        ({"render": "browser", "browser": {"viewport": {"width": 100}}}, "browser.viewport.width"),
        ({"render": "browser", "browser": {"viewport": {"height": 100000}}}, "browser.viewport.height"),
        ({"render": "browser", "browser": {"viewport": {"width": "800"}}}, "browser.viewport.width"),
        ({"render": "browser", "browser": {"viewport": {"depth": 3}}}, "browser.viewport.depth"),
        ({"render": "browser", "browser": {"block": ["scripts"]}}, "browser.block"),
        ({"render": "browser", "browser": {"block": "images"}}, "browser.block"),
        ({"render": "browser", "browser": {"cookies": []}}, "browser.cookies"),
    ],
)
def test_a_bad_render_field_is_refused_naming_it_and_creates_nothing(api, body, field):
    r = post(api, {"url": "https://example.com/", **body})
    assert r.status_code == 400, r.content
    errors = r.json()["fields"]
    # A nested field's error is listed under its top-level field, the messages naming the rest
    # of its path ("wait_until: ...", "viewport: width: ...").
    top, _, rest = field.partition(".")
    assert top in errors, (field, errors)
    if rest:
        prefix = rest.replace(".", ": ") + ": "
        assert any(m.startswith(prefix) for m in errors[top]), (field, errors)
    assert Job.objects.count() == 0


def test_render_and_its_options_are_part_of_the_fetch_key(api):
    bodies = [
        {"url": "https://example.com/a"},
        {"url": "https://example.com/a", "render": "browser"},
        {"url": "https://example.com/a", "render": "browser", "browser": {"screenshot": True}},
        {"url": "https://example.com/a", "render": "browser", "browser": {"wait_until": "load"}},
    ]
    keys = []
    for body in bodies:
        r = post(api, body)
        assert r.status_code == 202, r.content
        keys.append(job_fetch_decide(job_id=r.json()["id"]).key)
    plain, rendered, with_screenshot, explicit_default = keys
    assert len({plain, rendered, with_screenshot}) == 3
    assert explicit_default == rendered  # the options' defaults are filled in before the key
