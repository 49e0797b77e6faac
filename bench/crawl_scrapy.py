"""The Scrapy side of bench/crawl.py, run by the Python of the bench's own virtualenv (Scrapy from
PyPI, never in the project's requirements): ``python bench/crawl_scrapy.py BASE MAX_PAGES
CONCURRENCY MAX_DEPTH``. A CrawlSpider from ``BASE/p/0`` following every in-site link, with
CONCURRENT_REQUESTS and CONCURRENT_REQUESTS_PER_DOMAIN = CONCURRENCY, no download delay,
AutoThrottle off, robots.txt obeyed (as the service does by default), stopping after MAX_PAGES
responses (CLOSESPIDER_PAGECOUNT: requests already in flight still finish, so Scrapy may fetch
more). Prints one JSON line: {started, finished, pages} (pages: responses its spider parsed).

Imports nothing of the service (it runs outside the project's virtualenv).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from scrapy import signals
from scrapy.crawler import CrawlerProcess
from scrapy.linkextractors import LinkExtractor
from scrapy.spiders import CrawlSpider, Rule


def main(base: str, max_pages: int, concurrency: int, max_depth: int) -> None:
    seen: dict[str, float] = {}
    pages = 0

    class SiteSpider(CrawlSpider):
        name = "site"
        allowed_domains = [urlsplit(base).hostname or ""]
        start_urls = [f"{base}/p/0"]
        rules = (Rule(LinkExtractor(allow=r"/p/\d+$"), callback="parse_page", follow=True),)

        def parse_start_url(self, response: Any, **kwargs: Any) -> Any:
            return self.parse_page(response)

        def parse_page(self, response: Any) -> Any:
            nonlocal pages
            pages += 1
            return []

    process = CrawlerProcess(
        settings={
            "CONCURRENT_REQUESTS": concurrency,
            "CONCURRENT_REQUESTS_PER_DOMAIN": concurrency,
            "DOWNLOAD_DELAY": 0,
            "AUTOTHROTTLE_ENABLED": False,
            "ROBOTSTXT_OBEY": True,
            "CLOSESPIDER_PAGECOUNT": max_pages,
            "DEPTH_LIMIT": max_depth,
            "LOG_LEVEL": "WARNING",
            "TELNETCONSOLE_ENABLED": False,
            "COOKIES_ENABLED": False,
            "REACTOR_THREADPOOL_MAXSIZE": 20,
        }
    )
    crawler = process.create_crawler(SiteSpider)
    crawler.signals.connect(
        lambda **_: seen.setdefault("started", time.time()), signal=signals.spider_opened, weak=False
    )
    crawler.signals.connect(
        lambda **_: seen.setdefault("finished", time.time()), signal=signals.spider_closed, weak=False
    )
    process.crawl(crawler)
    process.start()
    print(json.dumps({"started": seen["started"], "finished": seen["finished"], "pages": pages}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
