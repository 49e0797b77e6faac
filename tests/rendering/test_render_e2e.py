"""Rendered jobs end to end (FR-30..FR-32, NFR-31, NFR-32): POST /jobs with render "browser", the
real control, beat and browser components (Debian's Chromium driven by Playwright), local pages on
loopback addresses only."""

from __future__ import annotations

import ipaddress
import os
import signal
import time
from urllib.parse import urlsplit

import pytest
from django.test import Client, override_settings

from apps.scraping.chromium_processes import main_chromiums
from tests.rendering.pages import Page, PageServer
from tests.support.connect_proxy import ConnectProxy
from tests.support.procs import wait_for

CHROMIUM = "/usr/bin/chromium"
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not os.access(CHROMIUM, os.X_OK),
        reason=f"no {CHROMIUM}: `make test` installs Debian's chromium where it can (apt-get as root)",
    ),
]
FINAL = ("succeeded", "failed", "cancelled")


@pytest.fixture
def rendering(services):
    """Control, beat and the browser component (two pages at once); returns the Services."""

    def start(**env: str):
        s = services(SCRAPEJOBS_BROWSER_CONCURRENCY="2", **env)
        s.start("control")
        s.start("beat")
        s.start("browser")
        return s

    return start


def _submit(api, url: str, **fields) -> str:
    response = api.post("/api/v1/jobs", {"url": url, "render": "browser", **fields}, format="json")
    assert response.status_code == 202, response.content
    return response.json()["id"]


def _job(api, job_id: str) -> dict:
    return api.get(f"/api/v1/jobs/{job_id}").json()


def _final(api, job_id: str, timeout: float = 60) -> dict:
    wait_for(lambda: _job(api, job_id)["status"] in FINAL, timeout, what=f"job {job_id} to finish")
    return _job(api, job_id)


def _attempts(api, job_id: str) -> list[dict]:
    return api.get(f"/api/v1/jobs/{job_id}/attempts").json()["items"]


def _download(url: str) -> bytes:
    link = Client().get(urlsplit(url).path)
    assert link.status_code == 200
    return b"".join(link.streaming_content)  # type: ignore[attr-defined]


def _body(api, job_id: str) -> tuple[dict, bytes]:
    result = api.get(f"/api/v1/jobs/{job_id}/result")
    assert result.status_code == 200, result.content
    meta = result.json()
    return meta, _download(meta["url"])


SCRIPTED = """<!doctype html><html><head><title>shell</title></head><body><div id="out"></div>
<script>document.getElementById("out").textContent = "written by" + " a script";</script></body></html>"""


def test_a_page_whose_text_only_a_script_writes_is_stored_with_that_text(rendering, api, site):
    url = site.html("/scripted", SCRIPTED)
    rendering()
    job_id = _submit(api, url)
    job = _final(api, job_id)
    assert job["status"] == "succeeded", (job, _attempts(api, job_id))
    assert job["render"] == "browser"
    meta, body = _body(api, job_id)
    assert b"written by a script" in body  # the server sent only the script, never this text
    assert b"written by a script" not in SCRIPTED.encode()
    assert meta["content_type"] == "text/html; charset=utf-8"
    assert meta["http_status"] == 200
    assert meta["size"] == len(body)
    assert meta["screenshot"] is None
    (attempt,) = _attempts(api, job_id)
    assert attempt["http_status"] == 200
    assert attempt["subrequests"] == {"made": 0, "blocked": 0}


LATE = """<!doctype html><html><body><p>shell</p><script>
setTimeout(function () { var d = document.createElement("div"); d.id = "late";
  d.textContent = "arrived" + " late"; document.body.appendChild(d); }, 1500);
</script></body></html>"""


def test_wait_for_selector_waits_for_the_element_and_a_screenshot_is_stored_and_linked(rendering, api, site):
    url = site.html("/late", LATE)
    rendering()
    without = _submit(api, url)
    waited = _submit(
        api, url, browser={"wait_for_selector": "#late", "screenshot": True, "viewport": {"width": 640}}
    )
    assert _final(api, without)["status"] == "succeeded"
    assert b"arrived late" not in _body(api, without)[1]  # load fired before the script's timer
    job = _final(api, waited)
    assert job["status"] == "succeeded", _attempts(api, waited)
    meta, body = _body(api, waited)
    assert b"arrived late" in body
    shot = meta["screenshot"]
    assert shot is not None and shot["content_type"] == "image/png"
    png = _download(shot["url"])  # signed: works without the token
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert int.from_bytes(png[16:20], "big") == 640  # the viewport's width


def _loopback_two() -> PageServer:
    return PageServer("127.0.0.2").start()


def test_a_page_script_cannot_reach_a_refused_address_and_the_attempt_records_it(rendering, api, site):
    # The page is on 127.0.0.2, which the operator allows; 127.0.0.1 (``site``) stays refused, as
    # every private address is with SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=false.
    page_site = _loopback_two()
    try:
        secret = site.html("/secret", "<p>internal</p>", headers={"Access-Control-Allow-Origin": "*"})
        ws = f"ws://127.0.0.1:{site.port}/socket"
        url = page_site.html(
            "/probe",
            f"""<!doctype html><html><body><div id="out">pending</div><script>
            var out = document.getElementById("out");
            try {{ new WebSocket("{ws}"); }} catch (e) {{}}
            fetch("{secret}").then(function (r) {{ return r.text(); }})
              .then(function (t) {{ out.textContent = "reached: " + t; }})
              .catch(function () {{ out.textContent = "blocked"; }})
              .finally(function () {{ var d = document.createElement("i"); d.id = "done";
                document.body.appendChild(d); }});
            </script></body></html>""",
        )
        rendering(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS="false", SCRAPEJOBS_ALLOWED_TARGET_NETWORKS="127.0.0.2/32")
        with override_settings(
            SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=False,
            SCRAPEJOBS_ALLOWED_TARGET_NETWORKS=(ipaddress.ip_network("127.0.0.2/32"),),
        ):
            refused = api.post("/api/v1/jobs", {"url": secret, "render": "browser"}, format="json")
            assert refused.status_code == 400  # intake refuses the private address itself
            job_id = _submit(api, url, browser={"wait_for_selector": "#done"})
        job = _final(api, job_id)
        assert job["status"] == "succeeded", _attempts(api, job_id)
        body = _body(api, job_id)[1]
        assert b"blocked" in body and b"internal" not in body
        assert site.requested() == []  # nothing ever reached 127.0.0.1
        (attempt,) = _attempts(api, job_id)
        assert attempt["subrequests"]["made"] >= 2  # the fetch and the websocket
        assert attempt["subrequests"]["blocked"] >= 2
    finally:
        page_site.stop()


def test_a_subresource_redirected_to_a_refused_address_is_blocked(rendering, api, site):
    page_site = _loopback_two()
    try:
        site.pages["/evil.js"] = Page(
            b'document.getElementById("out").textContent = "evil ran";', "text/javascript"
        )
        page_site.pages["/go-private.js"] = Page(
            b"", "text/javascript", 302, headers={"Location": site.url("/evil.js")}
        )
        page_site.pages["/ok.js"] = Page(
            b'document.getElementById("ok").textContent = "ok ran";', "text/javascript"
        )
        url = page_site.html(
            "/page",
            """<!doctype html><html><body><div id="out">untouched</div><div id="ok"></div>
            <script src="/go-private.js"></script><script src="/ok.js"></script></body></html>""",
        )
        rendering(SCRAPEJOBS_ALLOW_PRIVATE_TARGETS="false", SCRAPEJOBS_ALLOWED_TARGET_NETWORKS="127.0.0.2/32")
        with override_settings(
            SCRAPEJOBS_ALLOW_PRIVATE_TARGETS=False,
            SCRAPEJOBS_ALLOWED_TARGET_NETWORKS=(ipaddress.ip_network("127.0.0.2/32"),),
        ):
            job_id = _submit(api, url)
        job = _final(api, job_id)
        assert job["status"] == "succeeded", _attempts(api, job_id)
        body = _body(api, job_id)[1]
        assert b"ok ran" in body  # an allowed subresource is fetched and runs
        assert b"evil ran" not in body and b"untouched" in body
        assert site.requested() == []
        assert page_site.requested("/go-private.js") == ["/go-private.js"]  # the hop was judged
        (attempt,) = _attempts(api, job_id)
        assert attempt["subrequests"] == {"made": 2, "blocked": 1}
    finally:
        page_site.stop()


def _chromium_of(pid: int) -> list[int]:
    """The main Chromium process under ``pid`` (not its renderers and helpers)."""
    return sorted(main_chromiums(pid))


@pytest.mark.serial  # the kill must land before the render's timeout: beside other tests it did not
def test_a_browser_killed_mid_render_loses_no_job(rendering, api, site):
    slow = LATE.replace("1500", "6000")
    url = site.html("/slow-late", slow)
    browser = rendering().procs[-1]
    job_id = _submit(api, url, browser={"wait_for_selector": "#late"}, timeout_s=30)
    wait_for(
        lambda: _job(api, job_id)["status"] == "running" and _chromium_of(browser.pid), 60, what="a render"
    )
    wait_for(lambda: site.requested("/slow-late"), 30, what="the document's fetch")
    time.sleep(2.0)  # the page is loaded and waits for its selector (6 s after load)
    for pid in _chromium_of(browser.pid):
        os.kill(pid, signal.SIGKILL)
    job = _final(api, job_id, timeout=90)
    attempts = _attempts(api, job_id)
    assert job["status"] == "succeeded", attempts
    assert [a["outcome"] for a in attempts] == ["failed_temporary", "succeeded"]
    assert attempts[0]["error_class"] == "browser_crashed"
    assert b"arrived late" in _body(api, job_id)[1]
    assert browser.alive()  # the component itself stayed up and started a fresh Chromium


def test_render_in_a_batch_row_works(rendering, api, site):
    url = site.html("/batch-scripted", SCRIPTED)
    plain = site.html("/batch-plain", "<p>plain</p>")
    rendering()
    services_worker = None  # the plain row needs the plain worker: started below
    del services_worker
    response = api.post(
        "/api/v1/batches",
        [{"url": url, "render": "browser", "browser": {"wait_until": "domcontentloaded"}}, {"url": plain}],
        format="json",
    )
    assert response.status_code == 202, response.content
    batch = response.json()["id"]
    wait_for(lambda: api.get(f"/api/v1/batches/{batch}").json()["status"] == "loaded", 60, what="the batch")
    assert api.get(f"/api/v1/batches/{batch}").json()["loaded"] == 2
    items = api.get(f"/api/v1/jobs?batch={batch}").json()["items"]
    by_url = {item["url"]: item for item in items}
    assert by_url[url]["render"] == "browser" and by_url[plain]["render"] == "none"
    job = _final(api, by_url[url]["id"])
    assert job["status"] == "succeeded", _attempts(api, by_url[url]["id"])
    assert b"written by a script" in _body(api, by_url[url]["id"])[1]
    # The plain row is not the browser component's: it waits for a plain worker.
    assert _job(api, by_url[plain]["id"])["status"] == "queued"


def test_a_rendered_document_obeys_robots_txt_and_the_pages_requests_go_through_the_egress_proxy(
    rendering, api, site
):
    """FR-30 with FR-28 and the politeness of a plain fetch: a rendered job's document is fetched
    as a plain job's is, so robots.txt is obeyed for it (a disallowed path fails the job
    `robots_disallowed`, never requested, and no Chromium page is spent on it), and with an egress
    proxy set the document and the requests the page's scripts make all go through it, each to
    the address the guard vetted."""
    proxy = ConnectProxy().start()
    try:
        site.pages["/robots.txt"] = Page(b"User-agent: *\nDisallow: /private\n", "text/plain")
        site.pages["/app.js"] = Page(b"document.body.dataset.app = 'r' + 'an';", "text/javascript")
        allowed = site.html("/shop", "<body><script src=/app.js></script></body>")
        forbidden = site.html("/private/shop", "<p>secret</p>")
        rendering(SCRAPEJOBS_ROBOTS_OBEY="true", SCRAPEJOBS_EGRESS_PROXY=proxy.url())
        ok_id, no_id = _submit(api, allowed), _submit(api, forbidden)
        ok, no = _final(api, ok_id), _final(api, no_id)
        assert ok["status"] == "succeeded", _attempts(api, ok_id)
        assert b'data-app="ran"' in _body(api, ok_id)[1]  # the script came through, and ran
        assert no["status"] == "failed", _attempts(api, no_id)
        assert [a["error_class"] for a in _attempts(api, no_id)] == ["robots_disallowed"]
        assert "/private/shop" not in site.requested()
        assert site.requested("/robots.txt") and site.requested("/app.js")
        # Every tunnel went to the site's vetted address, and every request the site got (robots.txt,
        # the document, the page's script) came from a tunnel's end: none went around the proxy.
        assert proxy.connects and all(c == f"127.0.0.1:{site.port}" for c in proxy.connects), proxy.connects
        assert {path for path, _ in site.peers} >= {"/robots.txt", "/shop", "/app.js"}
        assert all(port in proxy.upstream_ports for _, port in site.peers), (site.peers, proxy.upstream_ports)
    finally:
        proxy.stop()
