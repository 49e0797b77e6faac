"""A crawl as a WARC 1.1 file (FR-47, docs/crawls.md), written with warcio: a ``warcinfo`` record,
then one record per page whose job stored a body, in the order the pages were taken.

The records are rebuilt from what is stored, not captured on the wire: the status and the kept
response headers (FR-25: at most 64, credential-like ones masked) over the stored body, which
the fetcher decoded, so ``Content-Encoding`` and ``Transfer-Encoding`` are dropped and
``Content-Length`` is the stored size. A page whose last attempt was served by single-flight
(another job's fetch of the same key) is a ``revisit`` record (identical payload digest) that
refers to that fetch's URL and date, without the body. Pages with no stored body (failed,
cancelled, still running, or removed by retention) have no record.

Each record is its own gzip member, written and handed on as soon as it is made: a crawl of any
size streams in bounded memory (one body at a time)."""

from __future__ import annotations

import base64
import hashlib
import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from typing import Any

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from apps.crawls.models import Crawl, CrawlPage
from apps.jobs.models import Attempt, Job, JobStatus
from apps.results.storage import results_storage

# Pages read per query, in seq order.
PAGES_PER_READ = 200
# Headers that described the bytes on the wire, not the stored body.
WIRE_HEADERS = frozenset({"content-encoding", "transfer-encoding", "content-length"})


@dataclass
class WarcCounts:
    responses: int = 0
    revisits: int = 0
    skipped: int = 0


class _Sink(io.RawIOBase):
    """What the writer writes into: taken out after each record."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out, self.parts = b"".join(self.parts), []
        return out


def _warc_date(moment: datetime | None) -> str | None:
    return None if moment is None else moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _http_headers(job: Job, size: int) -> StatusAndHeaders:
    status = job.result_http_status or 200
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = ""
    kept = [(k, str(v)) for k, v in (job.result_headers or {}).items() if k.lower() not in WIRE_HEADERS]
    kept.append(("content-length", str(size)))
    return StatusAndHeaders(f"{status} {reason}".strip(), kept, protocol="HTTP/1.1")


def _sha256_digest(hex_digest: str) -> str:
    return "sha256:" + base64.b32encode(bytes.fromhex(hex_digest)).decode()


def _served_from(job_ids: list[uuid.UUID], jobs: dict[uuid.UUID, Job]) -> dict[uuid.UUID, Job]:
    """Each page job whose last attempt was served by another job's fetch, and that job."""
    served = {
        a.job_id: a.served_from_job
        for a in Attempt.objects.filter(job_id__in=job_ids, served_from_job__isnull=False).only(
            "job_id", "number", "served_from_job"
        )
        if a.number == jobs[a.job_id].attempts
    }
    sources = Job.objects.in_bulk([s for s in served.values() if s is not None])
    return {page: sources[src] for page, src in served.items() if src in sources}


def _pages(crawl: Crawl) -> Iterator[list[tuple[CrawlPage, Job]]]:
    after = 0
    while True:
        pages = list(
            CrawlPage.objects.filter(crawl_id=crawl.id, seq__gt=after).order_by("seq")[:PAGES_PER_READ]
        )
        if not pages:
            return
        jobs = Job.objects.filter(tenant_id=crawl.tenant_id).in_bulk([p.job_id for p in pages])
        yield [(p, jobs[p.job_id]) for p in pages if p.job_id in jobs]
        after = pages[-1].seq


def crawl_warc_chunks(*, crawl: Crawl, counts: WarcCounts | None = None) -> Iterator[bytes]:
    """The crawl's WARC (gzipped per record), a record at a time."""
    counts = counts if counts is not None else WarcCounts()
    sink = _Sink()
    writer = WARCWriter(sink, gzip=True, warc_version="1.1")
    info = writer.create_warcinfo_record(
        f"crawl-{crawl.id}.warc.gz",
        {
            "software": "scrapejobs (records rebuilt from stored results, docs/crawls.md)",
            "format": "WARC File Format 1.1",
            "scrapejobs-crawl": str(crawl.id),
            "scrapejobs-seeds": " ".join(crawl.seeds),
        },
    )
    writer.write_record(info)
    yield sink.take()
    for batch in _pages(crawl):
        jobs = {job.id: job for _, job in batch}
        served = _served_from(list(jobs), jobs)
        for page, job in batch:
            record = _record(writer, crawl, page, job, served.get(job.id))
            if record is None:
                counts.skipped += 1
                continue
            if record.rec_type == "revisit":
                counts.revisits += 1
            else:
                counts.responses += 1
            writer.write_record(record)
            yield sink.take()


def _record(writer: WARCWriter, crawl: Crawl, page: CrawlPage, job: Job, source: Job | None) -> Any:
    """The page's record, or None when it has no stored body to rebuild one from."""
    if job.status != JobStatus.SUCCEEDED or not job.result_key or job.result_deleted_at is not None:
        return None
    if job.result_sha256 is None:
        return None
    uri = job.result_final_url or job.url
    headers = {
        "WARC-Date": _warc_date(job.result_stored_at or job.finished_at),
        "WARC-Record-ID": f"<urn:uuid:{uuid.uuid5(crawl.id, str(page.seq))}>",
    }
    if source is not None:
        return writer.create_revisit_record(
            uri,
            digest=_sha256_digest(job.result_sha256),
            refers_to_uri=source.result_final_url or source.url,
            refers_to_date=_warc_date(source.result_stored_at or source.finished_at),
            http_headers=_http_headers(job, job.result_size or 0),
            warc_headers_dict=headers,
        )
    body = _stored_body(job)
    if body is None:
        return None
    return writer.create_warc_record(
        uri,
        "response",
        payload=io.BytesIO(body),
        length=None,
        http_headers=_http_headers(job, len(body)),
        warc_headers_dict=headers,
    )


def _stored_body(job: Job) -> bytes | None:
    """The stored body, held to its recorded SHA-256 (a body that is not what was recorded, or
    is gone from storage, is left out rather than exported as if it were)."""
    assert job.result_key is not None
    try:
        with results_storage().open(job.result_key, "rb") as fh:
            body = fh.read()
    except FileNotFoundError:
        return None
    if hashlib.sha256(body).hexdigest() != job.result_sha256:
        return None
    return body
