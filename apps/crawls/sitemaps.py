"""Reading a sitemap (FR-43, docs/crawls.md): the ``<loc>`` of its ``<url>`` entries (pages) or of
its ``<sitemap>`` entries (a sitemap index), from a stored body fed in chunks to libxml2's pull
parser, with the protocol's limits (https://www.sitemaps.org/protocol.html): 50,000 URLs and
50 MB uncompressed per file.

A sitemap is a hostile target's XML, so: no DTD at all (a document with a ``<!DOCTYPE>`` is
refused before anything of it is used: that is where a billion-laughs bomb or an external entity
is declared), entities never substituted (``resolve_entities=False``), no network
(``no_network=True``), no huge-tree mode; a gzipped file (its magic bytes, whatever its name or
Content-Type) is inflated with a bound on the output, never whole. Elements are dropped as soon as
they are read, so a file of 50,000 entries is held one entry at a time.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from lxml import etree

MAX_URLS = 50_000
MAX_BYTES = 50 * 1024 * 1024
_GZIP_MAGIC = b"\x1f\x8b"
_INFLATE_STEP = 64 * 1024


class SitemapRefused(Exception):
    """The document is not read: it declares a DTD, or passes 50 MB uncompressed."""


@dataclass
class SitemapEntries:
    pages: list[str] = field(default_factory=list)  # <urlset><url><loc>
    sitemaps: list[str] = field(default_factory=list)  # <sitemapindex><sitemap><loc>
    truncated: bool = False  # more than MAX_URLS entries: the rest were not read


def _bounded(chunks: Iterable[bytes], *, max_bytes: int) -> Iterator[bytes]:
    """The document's bytes, inflated when gzipped, refused past ``max_bytes`` of output."""
    it = iter(chunks)
    first = next((c for c in it if c), b"")
    total = 0
    if not first.startswith(_GZIP_MAGIC):
        for chunk in _chain(first, it):
            total += len(chunk)
            if total > max_bytes:
                raise SitemapRefused(f"more than {max_bytes} bytes")
            yield chunk
        return
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip framing
    for chunk in _chain(first, it):
        pending = chunk
        while pending:
            out = inflater.decompress(pending, _INFLATE_STEP)  # never more than a step at once
            total += len(out)
            if total > max_bytes:
                raise SitemapRefused(f"more than {max_bytes} bytes uncompressed")
            if out:
                yield out
            pending = inflater.unconsumed_tail
        if inflater.eof:
            return


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest


def _local(tag: object) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def sitemap_read(
    chunks: Iterable[bytes], *, max_urls: int = MAX_URLS, max_bytes: int = MAX_BYTES
) -> SitemapEntries:
    """The entries of a sitemap or sitemap index given as byte chunks (see the module docstring).
    Raises ``SitemapRefused``; a document cut short or malformed gives what was read before."""
    parser = etree.XMLPullParser(
        events=("start", "end"),
        resolve_entities=False,
        no_network=True,
        huge_tree=False,
        load_dtd=False,
        dtd_validation=False,
        remove_comments=True,
        remove_pis=True,
    )
    found = SitemapEntries()
    root_seen = False
    try:
        for chunk in _bounded(chunks, max_bytes=max_bytes):
            parser.feed(chunk)
            for event, elem in parser.read_events():
                if not root_seen:
                    root_seen = True
                    if elem.getroottree().docinfo.doctype:
                        raise SitemapRefused("a sitemap declares no DTD")
                if event != "end":
                    continue
                name = _local(elem.tag)
                if name == "loc":
                    parent = _local(elem.getparent().tag) if elem.getparent() is not None else ""
                    loc = (elem.text or "").strip()
                    if loc and parent in ("url", "sitemap"):
                        if len(found.pages) + len(found.sitemaps) >= max_urls:
                            found.truncated = True
                            return found
                        (found.pages if parent == "url" else found.sitemaps).append(loc)
                elif name in ("url", "sitemap"):
                    # Read: drop it and what came before it, so memory holds one entry.
                    elem.clear()
                    while elem.getprevious() is not None:
                        del elem.getparent()[0]
        parser.close()
    except etree.XMLSyntaxError as e:
        if not root_seen:  # nothing of it was a sitemap (libxml2 refuses an entity bomb here too)
            raise SitemapRefused(f"not a sitemap: {e}") from None
        # Cut short or malformed after its start: what was read is kept.
    return found
