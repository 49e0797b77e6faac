"""The synchronous client: ``Client(base_url, token)`` (docs/client.md)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import date, datetime
from pathlib import Path
from typing import Any

import httpx

from scrapejobs_client import _core
from scrapejobs_client._models import (
    TOKEN_SCOPES,
    Attempt,
    Batch,
    BatchCancelled,
    Crawl,
    CrawlPage,
    DisabledCallback,
    Job,
    JobCancelled,
    JobCancelRequested,
    JobCreated,
    Result,
    Token,
    TokenCreated,
    Usage,
    WebhookDelivery,
    WebhookSecretRotated,
    WebhookSecrets,
)
from scrapejobs_client.errors import (
    ApiError,
    BatchFailed,
    IntegrityError,
    InvalidRequest,
    RowsRejected,
    ScrapejobsError,
    WaitTimeout,
)

JobRef = str | Job | JobCreated | Mapping[str, Any]
CrawlRef = str | Crawl | Mapping[str, Any]
# submit_many sends at least this many rows as one batch (POST /batches) rather than job by job.
BATCH_THRESHOLD = 100


class TransportFailed(ScrapejobsError, ConnectionError):
    """The service could not be reached (connection refused, dropped, timed out), after retries."""


class Client:
    """A scrapejobs API client. ``base_url`` and ``token`` default to SCRAPEJOBS_URL and
    SCRAPEJOBS_TOKEN. Safe to share between threads (httpx.Client is)."""

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout_s: float = _core.DEFAULT_TIMEOUT_S,
        max_retries: int = 8,
        batch_threshold: int = BATCH_THRESHOLD,
        transport: httpx.BaseTransport | None = None,
    ):
        self.base_url, token = _core.settings_from_env(base_url, token)
        self.max_retries = max_retries
        self.batch_threshold = batch_threshold
        self._http = httpx.Client(
            base_url=self.base_url + "/api/v1",
            headers=_core.client_headers(token),
            timeout=timeout_s,
            transport=transport,
        )
        # Signed result links need no token, and are not sent one.
        self._links = httpx.Client(timeout=timeout_s, transport=transport)

    def close(self) -> None:
        self._http.close()
        self._links.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- transport --------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        retry_dropped: bool = True,
        timeout_s: float | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        """One API call: 429 and 503 are asked again after their Retry-After; a dropped or refused
        connection is asked again when ``retry_dropped`` (reads, and writes made idempotent by an
        Idempotency-Key). Any other error answer raises its ApiError."""
        if timeout_s is not None:
            kwargs["timeout"] = timeout_s
        attempt = 0
        http = self._links if path.startswith(("http://", "https://")) else self._http
        while True:
            try:
                response = http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                if not retry_dropped or attempt >= self.max_retries:
                    raise TransportFailed(f"{method} {path}: {exc!r}") from exc
                time.sleep(_core.backoff_s(attempt))
                attempt += 1
                continue
            if response.status_code in _core.RETRY_STATUSES and attempt < self.max_retries:
                time.sleep(_core.retry_delay(response, attempt))
                attempt += 1
                continue
            _core.raise_for(response)
            return response

    # --- jobs -------------------------------------------------------------------------------

    def submit(self, url: str, *, idempotency_key: str | None = None, **fields: Any) -> JobCreated:
        """POST /jobs. ``fields`` are the job's other fields (method, headers, body, priority,
        callback_url, max_attempts, timeout_s, max_age_s), checked before sending. An
        Idempotency-Key is made when none is given, so a call retried after a dropped connection
        gives back the same job instead of a second one."""
        body = _core.job_body(url, fields)
        key = idempotency_key or _core.new_idempotency_key()
        r = self._request("POST", "/jobs", json=body, headers={"Idempotency-Key": key})
        return JobCreated.from_dict(r.json())

    def get(self, job: JobRef, *, wait_s: int | None = None) -> Job:
        params = {"wait": wait_s} if wait_s else None
        timeout = None if not wait_s else wait_s + _core.DEFAULT_TIMEOUT_S
        r = self._request("GET", f"/jobs/{_core.job_id_of(job)}", params=params, timeout_s=timeout)
        return Job.from_dict(r.json())

    def wait(self, job: JobRef, timeout: float | None = None) -> Job:
        """The job once final; long-polls with ?wait= (up to 30 s a call), never a tight loop.
        Raises WaitTimeout (with the job's last state) after ``timeout`` seconds (None: forever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        current = job if isinstance(job, Job) else None
        while True:
            if current is not None and _core.is_final(current):
                return current
            remaining = _core.MAX_WAIT_S if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(current or self.get(job))
            asked = time.monotonic()
            current = self.get(job, wait_s=_core.wait_step(remaining))
            if not _core.is_final(current) and time.monotonic() - asked < 0.5:
                time.sleep(0.5)  # an answer that came back early and not final: no tight loop

    def jobs(
        self,
        *,
        status: str | None = None,
        priority: str | None = None,
        batch: str | None = None,
        crawl: str | None = None,
        limit: int = 500,
    ) -> Iterator[Job]:
        """Every job of the tenant (newest first), filtered; walks the cursor one page at a time."""
        params: dict[str, Any] = {"limit": limit}
        for name, value in (
            ("status", status),
            ("priority", priority),
            ("batch", batch),
            ("crawl", crawl),
        ):
            if value is not None:
                params[name] = value
        while True:
            page = self._request("GET", "/jobs", params=params).json()
            for item in page["items"]:
                yield Job.from_dict(item)
            if not page.get("next_cursor"):
                return
            params["cursor"] = page["next_cursor"]

    def attempts(self, job: JobRef) -> list[Attempt]:
        r = self._request("GET", f"/jobs/{_core.job_id_of(job)}/attempts")
        return [Attempt.from_dict(a) for a in r.json()["items"]]

    def result(self, job: JobRef) -> Result:
        """The result's metadata and its signed link (409 Conflict while not succeeded)."""
        return Result.from_dict(self._request("GET", f"/jobs/{_core.job_id_of(job)}/result").json())

    def result_bytes(self, job: JobRef) -> bytes:
        """The stored body, checked against the recorded size and SHA-256."""
        meta = self.result(job)
        data = self._request("GET", meta.url).content
        _verify(meta, len(data), hashlib.sha256(data).hexdigest())
        return data

    def download(self, job: JobRef, path: str | os.PathLike[str]) -> Result:
        """Stream the stored body to ``path`` (written whole or not at all), checking its
        SHA-256 on the way. Returns the result's metadata."""
        meta = self.result(job)
        target = Path(path)
        digest, size = hashlib.sha256(), 0
        fd, tmp = tempfile.mkstemp(dir=target.parent or ".", prefix=f".{target.name}.")
        try:
            with os.fdopen(fd, "wb") as out, self._links.stream("GET", meta.url) as r:
                if r.status_code >= 400:
                    r.read()
                    _core.raise_for(r)
                for chunk in r.iter_bytes(1 << 16):
                    digest.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
            _verify(meta, size, digest.hexdigest())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return meta

    def cancel(self, job: JobRef) -> JobCancelled | JobCancelRequested:
        r = self._request("POST", f"/jobs/{_core.job_id_of(job)}/cancel")
        data = r.json()
        return JobCancelRequested.from_dict(data) if r.status_code == 202 else JobCancelled.from_dict(data)

    def erase(self, job: JobRef) -> None:
        """DELETE /jobs/{id}: erase a final job (docs/erasure.md); it stays as a tombstone
        (status ``erased``) and reading it raises ApiError 410 ``job_erased``."""
        self._request("DELETE", f"/jobs/{_core.job_id_of(job)}")

    # --- batches ----------------------------------------------------------------------------

    def submit_batch(
        self,
        rows: Iterable[Mapping[str, Any]] | None = None,
        *,
        file: str | os.PathLike[str] | None = None,
        idempotency_key: str | None = None,
        callback_url: str | None = None,
    ) -> Batch:
        """POST /batches: a list of job rows, or a CSV / JSON-lines / Parquet file (by its
        suffix). Answers once the rows are stored; they become jobs when the batch is loaded.
        ``callback_url``: the batch is announced there (signed, once) when all its jobs are final."""
        headers = {"Idempotency-Key": idempotency_key or _core.new_idempotency_key()}
        params = None if callback_url is None else {"callback_url": callback_url}
        if file is not None:
            path = Path(file)
            headers["Content-Type"] = _content_type(path)
            with path.open("rb") as f:
                r = self._request("POST", "/batches", content=f.read(), headers=headers, params=params)
        else:
            payload = json.dumps(list(rows or [])).encode()
            headers["Content-Type"] = "application/json"
            r = self._request("POST", "/batches", content=payload, headers=headers, params=params)
        return Batch.from_dict(r.json())

    def batch(self, batch_id: str) -> Batch:
        return Batch.from_dict(self._request("GET", f"/batches/{batch_id}").json())

    def cancel_batch(self, batch_id: str) -> BatchCancelled:
        """POST /batches/{id}/cancel: its queued jobs at once, its running ones as a job cancel."""
        return BatchCancelled.from_dict(self._request("POST", f"/batches/{batch_id}/cancel").json())

    # --- crawls (docs/crawls.md) --------------------------------------------------------------

    def crawl(
        self,
        seeds: str | Iterable[str],
        *,
        max_pages: int,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> Crawl:
        """POST /crawls from one seed URL or several. ``fields``: max_depth, scope (same_origin,
        same_site, prefix), include, exclude, job (each page's job options), callback_url. An
        Idempotency-Key is made when none is given, so a retried call starts one crawl."""
        body = _core.crawl_body(seeds, max_pages, fields)
        key = idempotency_key or _core.new_idempotency_key()
        return Crawl.from_dict(
            self._request("POST", "/crawls", json=body, headers={"Idempotency-Key": key}).json()
        )

    def get_crawl(self, crawl: CrawlRef) -> Crawl:
        """GET /crawls/{id}: its status and its pages' and links' counts."""
        return Crawl.from_dict(self._request("GET", f"/crawls/{_core.crawl_id_of(crawl)}").json())

    def crawls(self, *, limit: int = 500) -> Iterator[Crawl]:
        """Every crawl of the tenant, newest first; walks the cursor one page at a time."""
        params: dict[str, Any] = {"limit": limit}
        while True:
            page = self._request("GET", "/crawls", params=params).json()
            yield from (Crawl.from_dict(item) for item in page["items"])
            if not page.get("next_cursor"):
                return
            params["cursor"] = page["next_cursor"]

    def crawl_pages(self, crawl: CrawlRef, *, limit: int = 500) -> Iterator[CrawlPage]:
        """Every page of the crawl in the order it was found (seq), its job's status with it."""
        params: dict[str, Any] = {"limit": limit}
        path = f"/crawls/{_core.crawl_id_of(crawl)}/pages"
        while True:
            page = self._request("GET", path, params=params).json()
            yield from (CrawlPage.from_dict(item) for item in page["items"])
            if page.get("next_cursor") is None:
                return
            params["cursor"] = page["next_cursor"]

    def cancel_crawl(self, crawl: CrawlRef) -> Crawl:
        """POST /crawls/{id}/cancel: no more pages; its queued jobs cancelled, running ones asked
        to stop. A crawl already ended is Conflict (409)."""
        return Crawl.from_dict(self._request("POST", f"/crawls/{_core.crawl_id_of(crawl)}/cancel").json())

    def crawl_warc(self, crawl: CrawlRef, path: str | os.PathLike[str]) -> int:
        """GET /crawls/{id}/warc streamed to ``path`` (written whole or not at all): the crawl's
        stored pages as a gzipped WARC file (docs/crawls.md). Returns the bytes written."""
        target = Path(path)
        fd, tmp = tempfile.mkstemp(dir=target.parent or ".", prefix=f".{target.name}.")
        size = 0
        try:
            with (
                os.fdopen(fd, "wb") as out,
                self._http.stream("GET", f"/crawls/{_core.crawl_id_of(crawl)}/warc") as r,
            ):
                if r.status_code >= 400:
                    r.read()
                    _core.raise_for(r)
                for chunk in r.iter_raw(1 << 16):
                    size += len(chunk)
                    out.write(chunk)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return size

    def follow_crawl(self, crawl: CrawlRef, timeout: float | None = None) -> Iterator[Crawl]:
        """The crawl's state every 0.5 to 2 s, the last one ended (completed or cancelled): its
        ``pages`` counts say how many were found and how many are final. Raises WaitTimeout
        (with the last state) after ``timeout`` seconds (None: forever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.5
        while True:
            current = self.get_crawl(crawl)
            yield current
            if _core.crawl_ended(current):
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(current)
            time.sleep(pause)
            pause = min(pause * 1.25, 2.0)

    def wait_crawl(
        self,
        crawl: CrawlRef,
        timeout: float | None = None,
        *,
        on_progress: Callable[[Crawl], None] | None = None,
    ) -> Crawl:
        """The crawl once ended; ``on_progress`` is called with each state seen on the way."""
        last = None
        for last in self.follow_crawl(crawl, timeout):
            if on_progress is not None:
                on_progress(last)
        assert last is not None
        return last

    def erase_batch(self, batch_id: str) -> Batch:
        """DELETE /batches/{id}: erase every job of a batch in the background; ``erasure`` on
        ``batch()`` shows the progress (docs/erasure.md)."""
        return Batch.from_dict((self._request("DELETE", f"/batches/{batch_id}")).json())

    # --- tokens and webhook secrets (an admin token's, docs/tokens.md) ------------------------

    def tokens(self) -> list[Token]:
        """GET /tokens: the tenant's tokens not revoked, newest first, without their secrets."""
        return [Token.from_dict(t) for t in self._request("GET", "/tokens").json()["items"]]

    def create_token(
        self, name: str, scope: str, *, expires_at: str | datetime | None = None
    ) -> TokenCreated:
        """POST /tokens. ``scope``: admin, full or read; ``expires_at`` an ISO 8601 time or a datetime
        (none: never, which only a token without expiry may ask). ``.token`` is the secret, shown
        this once. Not retried on a dropped connection: a retry could make a second token."""
        body = _token_body(name, scope, expires_at)
        return TokenCreated.from_dict(self._request("POST", "/tokens", json=body, retry_dropped=False).json())

    def revoke_token(self, token_id: int | Token | TokenCreated) -> None:
        """DELETE /tokens/{id}: refused by every web process from the moment this returns."""
        self._request("DELETE", f"/tokens/{_token_id(token_id)}")

    def webhook_secrets(self) -> WebhookSecrets:
        """GET /webhook-secrets: the current and previous secrets' creation and expiry, no values."""
        return WebhookSecrets.from_dict(self._request("GET", "/webhook-secrets").json())

    def rotate_webhook_secret(self) -> WebhookSecretRotated:
        """POST /webhook-secrets/rotate: ``.secret`` is the new secret, shown this once; the old one
        signs beside it until ``.previous_expires_at``. Not retried on a dropped connection."""
        r = self._request("POST", "/webhook-secrets/rotate", retry_dropped=False)
        return WebhookSecretRotated.from_dict(r.json())

    # --- usage (any token, docs/usage.md) -------------------------------------------------------

    def usage(self, from_: str | date, to: str | date) -> Usage:
        """GET /usage: per UTC day from ``from_`` to ``to`` (both included, at most 366 days), jobs
        submitted, attempts by outcome, bytes stored, rendered pages, batches and crawls, with totals."""
        params = {"from": _day(from_), "to": _day(to)}
        return Usage.from_dict(self._request("GET", "/usage", params=params).json())

    # --- webhook deliveries (docs/webhooks.md) ------------------------------------------------

    def webhook_deliveries(
        self, *, status: str | None = None, job: JobRef | None = None, limit: int = 500
    ) -> Iterator[WebhookDelivery]:
        """Every webhook delivery of the tenant (newest first), filtered by ``status`` (pending,
        delivered, failed, skipped) and ``job``; walks the cursor one page at a time."""
        params: dict[str, Any] = {"limit": limit}
        if status is not None:
            params["status"] = status
        if job is not None:
            params["job"] = _core.job_id_of(job)
        while True:
            page = self._request("GET", "/webhook-deliveries", params=params).json()
            for item in page["items"]:
                yield WebhookDelivery.from_dict(item)
            if not page.get("next_cursor"):
                return
            params["cursor"] = page["next_cursor"]

    def redeliver(self, delivery: int | WebhookDelivery) -> None:
        """POST /webhook-deliveries/{id}/redeliver: sent again now, the same webhook-id, a new
        signature."""
        self._request("POST", f"/webhook-deliveries/{_delivery_id(delivery)}/redeliver")

    def disabled_callbacks(self) -> list[DisabledCallback]:
        """GET /disabled-callbacks: the receiver URLs a 410 switched off."""
        return [
            DisabledCallback.from_dict(d) for d in self._request("GET", "/disabled-callbacks").json()["items"]
        ]

    def enable_callback(self, callback: int | DisabledCallback) -> None:
        """POST /disabled-callbacks/{id}/enable: later deliveries to the URL are sent again."""
        self._request("POST", f"/disabled-callbacks/{_delivery_id(callback)}/enable")

    def wait_loaded(self, batch_id: str, timeout: float | None = None) -> Batch:
        """The batch once ``loaded`` (its rows are jobs); BatchFailed if it failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.2
        while True:
            current = self.batch(batch_id)
            if current.status == "loaded":
                return current
            if current.status == "failed":
                raise BatchFailed(current)
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(current)
            time.sleep(pause)
            pause = min(pause * 1.5, 2.0)

    def batch_job_ids(self, batch: Batch) -> list[str | None]:
        """The batch's job ids by row (index 0 is row 1); None for a rejected row."""
        ids: list[str | None] = [None] * batch.total
        for job in self.jobs(batch=batch.id):
            if job.batch_row is not None:
                ids[job.batch_row - 1] = job.id
        return ids

    def submit_many(
        self, rows: Iterable[Mapping[str, Any] | str], *, timeout: float | None = 600
    ) -> list[str]:
        """Submit every row (a job's fields, or just a URL); returns the job ids in row order.
        At least ``batch_threshold`` rows go as one batch (POST /batches), fewer one by one. A
        row the API refuses raises RowsRejected (its ``ids`` hold the others' jobs)."""
        prepared = [{"url": r} if isinstance(r, str) else dict(r) for r in rows]
        if len(prepared) < self.batch_threshold:
            ids: list[str | None] = []
            rejected: list[Any] = []
            for n, row in enumerate(prepared, 1):
                try:
                    ids.append(self.submit(row.pop("url"), **row).id)
                except (InvalidRequest, ApiError) as exc:
                    if isinstance(exc, ApiError) and exc.status_code != 400:
                        raise
                    ids.append(None)
                    rejected.append({"row": n, "errors": exc.fields})
            if rejected:
                raise RowsRejected(ids, rejected)
            return [i for i in ids if i is not None]
        receipt = self.submit_batch(prepared)
        loaded = self.wait_loaded(receipt.id, timeout=timeout)
        ids = self.batch_job_ids(loaded)
        if loaded.rejected:
            raise RowsRejected(ids, [r.raw for r in loaded.rejected_rows])
        missing = [n for n, i in enumerate(ids, 1) if i is None]
        if missing:
            raise ScrapejobsError(f"batch {loaded.id}: no job for rows {missing[:5]}")
        return [i for i in ids if i is not None]


def _content_type(path: Path) -> str:
    suffix = path.suffix.lower()
    types = {".csv": "text/csv", ".jsonl": "application/x-ndjson", ".ndjson": "application/x-ndjson"}
    types.update({".parquet": "application/vnd.apache.parquet", ".json": "application/json"})
    if suffix not in types:
        raise ValueError(f"{path}: a batch file is .csv, .jsonl, .json or .parquet")
    return types[suffix]


def _verify(meta: Result, size: int, sha256: str) -> None:
    if size != meta.size or sha256 != meta.sha256:
        raise IntegrityError(
            f"result body: {size} bytes, sha256 {sha256}; the API recorded {meta.size} bytes, {meta.sha256}"
        )


def _token_body(name: str, scope: str, expires_at: str | datetime | None) -> dict[str, Any]:
    if scope not in TOKEN_SCOPES:
        raise InvalidRequest({"scope": [f"One of {', '.join(TOKEN_SCOPES)}."]})
    body: dict[str, Any] = {"name": name, "scope": scope}
    if expires_at is not None:
        body["expires_at"] = expires_at.isoformat() if isinstance(expires_at, datetime) else expires_at
    return body


def _token_id(token: int | Token | TokenCreated) -> int:
    return token.id if isinstance(token, Token | TokenCreated) else int(token)


def _delivery_id(item: int | WebhookDelivery | DisabledCallback) -> int:
    return item.id if isinstance(item, WebhookDelivery | DisabledCallback) else int(item)


def _day(value: str | date) -> str:
    return value.isoformat() if isinstance(value, date) else value
