"""Read a sitemap file the way a crawl does (apps.crawls.sitemaps.sitemap_read, fed in chunks), in
a process of its own, and print how its peak resident memory grew while reading: a hostile
sitemap's cost that another test's memory cannot blur (as tests/support/decode_probe.py does for
batch files).

    python -m tests.support.sitemap_probe <path>

Prints one JSON object: ``outcome`` (``read``, or the refusal's class), ``reason``, ``pages``,
``sitemaps`` (entries read), ``grown_mb``."""

from __future__ import annotations

import json
import os
import sys

from tests.support.decode_probe import _status_kb


def main(path: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings.test")
    import django  # noqa: PLC0415

    django.setup()
    from apps.crawls.sitemaps import sitemap_read  # noqa: PLC0415

    with open("/proc/self/clear_refs", "w") as refs:  # the peak from here on (Linux)
        refs.write("5")
    before = _status_kb("VmRSS")
    outcome, reason, pages, sitemaps = "read", "", 0, 0

    def chunks():
        with open(path, "rb") as fh:
            while chunk := fh.read(64 * 1024):
                yield chunk

    try:
        found = sitemap_read(chunks())
        pages, sitemaps = len(found.pages), len(found.sitemaps)
    except Exception as e:  # noqa: BLE001 - the refusal is what is reported
        outcome, reason = type(e).__name__, str(e)
    grown_kb = _status_kb("VmHWM") - before
    print(
        json.dumps(
            {
                "outcome": outcome,
                "reason": reason,
                "pages": pages,
                "sitemaps": sitemaps,
                "grown_mb": grown_kb / 1024,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
