"""The generated local site bench/crawl.py crawls: ``python -m bench.crawl_site PAGES DELAY_S``
prints its base URL (``http://127.0.0.1:PORT``) and serves, on one event loop (so a hundred pages
held for seconds cost it little), over HTTP/1.1 with keep-alive:

- ``/p/N``                  page N of PAGES, answered after DELAY_S: links to the 10 pages
                            ``(10 N + 1 + i) mod PAGES`` (a ten-way tree from page 0 that wraps
                            round, so later pages link to pages already found) and 2 links to
                            another host, outside any crawl's scope
- ``/robots.txt``           allows everything and names ``/sitemap_index.xml``
- ``/sitemap_index.xml``    a sitemap index of ``/sitemap-1.xml.gz`` and ``/sitemap-2.xml.gz``,
                            gzipped sitemaps of the first and second half of the pages
- ``/stats``                JSON ``{pages, distinct_pages, other, max_in_flight}``: requests for
                            pages, how many different pages, other requests, the most page
                            requests held at once

Bound to 127.0.0.1 only. Nothing here imports the service: the Scrapy side runs against the same
server.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import resource
import sys
from urllib.parse import urlsplit

MAX_HEADER_BYTES = 16384


class Site:
    def __init__(self, pages: int, delay_s: float):
        self.pages, self.delay_s = pages, delay_s
        self.base = ""
        self.requests = 0
        self.seen: set[int] = set()
        self.other = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._sitemaps: dict[int, bytes] = {}

    def links(self, n: int) -> list[str]:
        inside = [f"/p/{(10 * n + 1 + i) % self.pages}" for i in range(10)]
        return [*inside, f"http://elsewhere.invalid/{n}/a", f"http://elsewhere.invalid/{n}/b"]

    def page(self, n: int) -> bytes:
        anchors = "".join(f'<li><a href="{href}">link {i}</a></li>' for i, href in enumerate(self.links(n)))
        return (
            f"<!doctype html><html><head><title>page {n}</title></head>"
            f"<body><h1>page {n}</h1><ul>{anchors}</ul></body></html>"
        ).encode()

    def sitemap(self, part: int) -> bytes:
        if part not in self._sitemaps:
            half = (self.pages + 1) // 2
            numbers = range(0, half) if part == 1 else range(half, self.pages)
            urls = "".join(f"<url><loc>{self.base}/p/{n}</loc></url>" for n in numbers)
            xml = f'<?xml version="1.0" encoding="UTF-8"?><urlset xmlns="{_NS}">{urls}</urlset>'
            self._sitemaps[part] = gzip.compress(xml.encode(), mtime=0)
        return self._sitemaps[part]

    def sitemap_index(self) -> bytes:
        entries = "".join(f"<sitemap><loc>{self.base}/sitemap-{k}.xml.gz</loc></sitemap>" for k in (1, 2))
        return f'<?xml version="1.0" encoding="UTF-8"?><sitemapindex xmlns="{_NS}">{entries}</sitemapindex>'.encode()

    def stats(self) -> bytes:
        return json.dumps(
            {
                "pages": self.requests,
                "distinct_pages": len(self.seen),
                "other": self.other,
                "max_in_flight": self.max_in_flight,
            }
        ).encode()


_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"


def _response(code: int, body: bytes, content_type: str) -> bytes:
    reason = {200: "OK", 404: "Not Found", 400: "Bad Request"}.get(code, "Other")
    head = (
        f"HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
    )
    return head.encode() + body


async def _answer(site: Site, target: str) -> bytes:
    path = urlsplit(target).path
    if path == "/stats":
        return _response(200, site.stats(), "application/json")
    seg = path.strip("/").split("/")
    if len(seg) == 2 and seg[0] == "p" and seg[1].isdigit() and int(seg[1]) < site.pages:
        n = int(seg[1])
        site.requests += 1
        site.seen.add(n)
        site.in_flight += 1
        site.max_in_flight = max(site.max_in_flight, site.in_flight)
        try:
            await asyncio.sleep(site.delay_s)
        finally:
            site.in_flight -= 1
        return _response(200, site.page(n), "text/html; charset=utf-8")
    site.other += 1
    if path == "/robots.txt":
        robots = f"User-agent: *\nDisallow:\n\nSitemap: {site.base}/sitemap_index.xml\n"
        return _response(200, robots.encode(), "text/plain")
    if path == "/sitemap_index.xml":
        return _response(200, site.sitemap_index(), "application/xml")
    if path in ("/sitemap-1.xml.gz", "/sitemap-2.xml.gz"):
        return _response(200, site.sitemap(int(path[9])), "application/x-gzip")
    return _response(404, b"no such page", "text/plain")


async def _connection(site: Site, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            lines = head.decode("latin-1").split("\r\n")
            try:
                _method, target, _version = lines[0].split(" ", 2)
            except ValueError:
                writer.write(_response(400, b"bad request line", "text/plain"))
                return
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length" and int(value.strip() or 0):
                    await reader.readexactly(int(value.strip()))
            writer.write(await _answer(site, target))
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def _serve(site: Site) -> None:
    server = await asyncio.start_server(
        lambda r, w: _connection(site, r, w), "127.0.0.1", 0, backlog=4096, limit=MAX_HEADER_BYTES
    )
    site.base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    print(site.base, flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    site = Site(int(argv[0]), float(argv[1]))
    try:
        asyncio.run(_serve(site))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
