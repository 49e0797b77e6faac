"""The asynchronous client: ``AsyncClient(base_url, token)``, the same surface as ``Client``
with coroutines (and ``jobs`` an async iterator) (docs/client.md)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from datetime import date, datetime
from pathlib import Path
from typing import Any

import httpx

from scrapejobs_client import _core
from scrapejobs_client._models import (
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
from scrapejobs_client.client import (
    BATCH_THRESHOLD,
    CrawlRef,
    JobRef,
    TransportFailed,
    _content_type,
    _day,
    _delivery_id,
    _token_body,
    _token_id,
    _verify,
)
from scrapejobs_client.errors import (
    ApiError,
    BatchFailed,
    InvalidRequest,
    RowsRejected,
    ScrapejobsError,
    WaitTimeout,
)


class AsyncClient:
    """The asyncio twin of ``Client``: the same methods, awaited."""

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout_s: float = _core.DEFAULT_TIMEOUT_S,
        max_retries: int = 8,
        batch_threshold: int = BATCH_THRESHOLD,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self.base_url, token = _core.settings_from_env(base_url, token)
        self.max_retries = max_retries
        self.batch_threshold = batch_threshold
        self._http = httpx.AsyncClient(
            base_url=self.base_url + "/api/v1",
            headers=_core.client_headers(token),
            timeout=timeout_s,
            transport=transport,
        )
        # Signed result links need no token, and are not sent one.
        self._links = httpx.AsyncClient(timeout=timeout_s, transport=transport)

    async def close(self) -> None:
        await self._http.aclose()
        await self._links.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- transport --------------------------------------------------------------------------

    async def _request(
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
                response = await http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                if not retry_dropped or attempt >= self.max_retries:
                    raise TransportFailed(f"{method} {path}: {exc!r}") from exc
                await asyncio.sleep(_core.backoff_s(attempt))
                attempt += 1
                continue
            if response.status_code in _core.RETRY_STATUSES and attempt < self.max_retries:
                await asyncio.sleep(_core.retry_delay(response, attempt))
                attempt += 1
                continue
            _core.raise_for(response)
            return response

    # --- jobs -------------------------------------------------------------------------------

    async def submit(self, url: str, *, idempotency_key: str | None = None, **fields: Any) -> JobCreated:
        """POST /jobs. ``fields`` are the job's other fields (method, headers, body, priority,
        callback_url, max_attempts, timeout_s, max_age_s), checked before sending. An
        Idempotency-Key is made when none is given, so a call retried after a dropped connection
        gives back the same job instead of a second one."""
        body = _core.job_body(url, fields)
        key = idempotency_key or _core.new_idempotency_key()
        r = await self._request("POST", "/jobs", json=body, headers={"Idempotency-Key": key})
        return JobCreated.from_dict(r.json())

    async def get(self, job: JobRef, *, wait_s: int | None = None) -> Job:
        params = {"wait": wait_s} if wait_s else None
        timeout = None if not wait_s else wait_s + _core.DEFAULT_TIMEOUT_S
        r = await self._request("GET", f"/jobs/{_core.job_id_of(job)}", params=params, timeout_s=timeout)
        return Job.from_dict(r.json())

    async def wait(self, job: JobRef, timeout: float | None = None) -> Job:
        """The job once final; long-polls with ?wait= (up to 30 s a call), never a tight loop.
        Raises WaitTimeout (with the job's last state) after ``timeout`` seconds (None: forever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        current = job if isinstance(job, Job) else None
        while True:
            if current is not None and _core.is_final(current):
                return current
            remaining = _core.MAX_WAIT_S if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(current or await self.get(job))
            asked = time.monotonic()
            current = await self.get(job, wait_s=_core.wait_step(remaining))
            if not _core.is_final(current) and time.monotonic() - asked < 0.5:
                await asyncio.sleep(0.5)  # an answer that came back early and not final: no tight loop

    async def jobs(
        self,
        *,
        status: str | None = None,
        priority: str | None = None,
        batch: str | None = None,
        crawl: str | None = None,
        limit: int = 500,
    ) -> AsyncIterator[Job]:
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
            page = (await self._request("GET", "/jobs", params=params)).json()
            for item in page["items"]:
                yield Job.from_dict(item)
            if not page.get("next_cursor"):
                return
            params["cursor"] = page["next_cursor"]

    async def attempts(self, job: JobRef) -> list[Attempt]:
        r = await self._request("GET", f"/jobs/{_core.job_id_of(job)}/attempts")
        return [Attempt.from_dict(a) for a in r.json()["items"]]

    async def result(self, job: JobRef) -> Result:
        """The result's metadata and its signed link (409 Conflict while not succeeded)."""
        return Result.from_dict((await self._request("GET", f"/jobs/{_core.job_id_of(job)}/result")).json())

    async def result_bytes(self, job: JobRef) -> bytes:
        """The stored body, checked against the recorded size and SHA-256."""
        meta = await self.result(job)
        data = (await self._request("GET", meta.url)).content
        _verify(meta, len(data), hashlib.sha256(data).hexdigest())
        return data

    async def download(self, job: JobRef, path: str | os.PathLike[str]) -> Result:
        """Stream the stored body to ``path`` (written whole or not at all), checking its
        SHA-256 on the way. Returns the result's metadata."""
        meta = await self.result(job)
        target = Path(path)
        digest, size = hashlib.sha256(), 0
        fd, tmp = tempfile.mkstemp(dir=target.parent or ".", prefix=f".{target.name}.")
        try:
            with os.fdopen(fd, "wb") as out:
                async with self._links.stream("GET", meta.url) as r:
                    if r.status_code >= 400:
                        await r.aread()
                    _core.raise_for(r)
                    async for chunk in r.aiter_bytes(1 << 16):
                        digest.update(chunk)
                        size += len(chunk)
                        out.write(chunk)
            _verify(meta, size, digest.hexdigest())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return meta

    async def cancel(self, job: JobRef) -> JobCancelled | JobCancelRequested:
        r = await self._request("POST", f"/jobs/{_core.job_id_of(job)}/cancel")
        data = r.json()
        return JobCancelRequested.from_dict(data) if r.status_code == 202 else JobCancelled.from_dict(data)

    async def erase(self, job: JobRef) -> None:
        """DELETE /jobs/{id}: erase a final job (docs/erasure.md); it stays as a tombstone
        (status ``erased``) and reading it raises ApiError 410 ``job_erased``."""
        await self._request("DELETE", f"/jobs/{_core.job_id_of(job)}")

    # --- batches ----------------------------------------------------------------------------

    async def submit_batch(
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
                r = await self._request("POST", "/batches", content=f.read(), headers=headers, params=params)
        else:
            payload = json.dumps(list(rows or [])).encode()
            headers["Content-Type"] = "application/json"
            r = await self._request("POST", "/batches", content=payload, headers=headers, params=params)
        return Batch.from_dict(r.json())

    async def batch(self, batch_id: str) -> Batch:
        return Batch.from_dict((await self._request("GET", f"/batches/{batch_id}")).json())

    async def cancel_batch(self, batch_id: str) -> BatchCancelled:
        """POST /batches/{id}/cancel: its queued jobs at once, its running ones as a job cancel."""
        return BatchCancelled.from_dict((await self._request("POST", f"/batches/{batch_id}/cancel")).json())

    # --- crawls (docs/crawls.md) --------------------------------------------------------------

    async def crawl(
        self,
        seeds: str | Iterable[str],
        *,
        max_pages: int,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> Crawl:
        body = _core.crawl_body(seeds, max_pages, fields)
        key = idempotency_key or _core.new_idempotency_key()
        r = await self._request("POST", "/crawls", json=body, headers={"Idempotency-Key": key})
        return Crawl.from_dict(r.json())

    async def get_crawl(self, crawl: CrawlRef) -> Crawl:
        return Crawl.from_dict((await self._request("GET", f"/crawls/{_core.crawl_id_of(crawl)}")).json())

    async def crawls(self, *, limit: int = 500) -> AsyncIterator[Crawl]:
        params: dict[str, Any] = {"limit": limit}
        while True:
            page = (await self._request("GET", "/crawls", params=params)).json()
            for item in page["items"]:
                yield Crawl.from_dict(item)
            if not page.get("next_cursor"):
                return
            params["cursor"] = page["next_cursor"]

    async def crawl_pages(self, crawl: CrawlRef, *, limit: int = 500) -> AsyncIterator[CrawlPage]:
        params: dict[str, Any] = {"limit": limit}
        path = f"/crawls/{_core.crawl_id_of(crawl)}/pages"
        while True:
            page = (await self._request("GET", path, params=params)).json()
            for item in page["items"]:
                yield CrawlPage.from_dict(item)
            if page.get("next_cursor") is None:
                return
            params["cursor"] = page["next_cursor"]

    async def cancel_crawl(self, crawl: CrawlRef) -> Crawl:
        r = await self._request("POST", f"/crawls/{_core.crawl_id_of(crawl)}/cancel")
        return Crawl.from_dict(r.json())

    async def crawl_warc(self, crawl: CrawlRef, path: str | os.PathLike[str]) -> int:
        target = Path(path)
        fd, tmp = tempfile.mkstemp(dir=target.parent or ".", prefix=f".{target.name}.")
        size = 0
        try:
            with os.fdopen(fd, "wb") as out:
                async with self._http.stream("GET", f"/crawls/{_core.crawl_id_of(crawl)}/warc") as r:
                    if r.status_code >= 400:
                        await r.aread()
                    _core.raise_for(r)
                    async for chunk in r.aiter_raw(1 << 16):
                        size += len(chunk)
                        out.write(chunk)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return size

    async def follow_crawl(self, crawl: CrawlRef, timeout: float | None = None) -> AsyncIterator[Crawl]:
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.5
        while True:
            current = await self.get_crawl(crawl)
            yield current
            if _core.crawl_ended(current):
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(current)
            await asyncio.sleep(pause)
            pause = min(pause * 1.25, 2.0)

    async def wait_crawl(
        self,
        crawl: CrawlRef,
        timeout: float | None = None,
        *,
        on_progress: Callable[[Crawl], None] | None = None,
    ) -> Crawl:
        last = None
        async for last in self.follow_crawl(crawl, timeout):
            if on_progress is not None:
                on_progress(last)
        assert last is not None
        return last

    async def erase_batch(self, batch_id: str) -> Batch:
        """DELETE /batches/{id}: erase every job of a batch in the background; ``erasure`` on
        ``batch()`` shows the progress (docs/erasure.md)."""
        return Batch.from_dict((await self._request("DELETE", f"/batches/{batch_id}")).json())

    # --- tokens and webhook secrets (an admin token's, docs/tokens.md) ------------------------

    async def tokens(self) -> list[Token]:
        """GET /tokens: the tenant's tokens not revoked, newest first, without their secrets."""
        return [Token.from_dict(t) for t in (await self._request("GET", "/tokens")).json()["items"]]

    async def create_token(
        self, name: str, scope: str, *, expires_at: str | datetime | None = None
    ) -> TokenCreated:
        """POST /tokens. ``scope``: admin, full or read; ``expires_at`` an ISO 8601 time or a datetime
        (none: never, which only a token without expiry may ask). ``.token`` is the secret, shown
        this once. Not retried on a dropped connection: a retry could make a second token."""
        body = _token_body(name, scope, expires_at)
        return TokenCreated.from_dict(
            (await self._request("POST", "/tokens", json=body, retry_dropped=False)).json()
        )

    async def revoke_token(self, token_id: int | Token | TokenCreated) -> None:
        """DELETE /tokens/{id}: refused by every web process from the moment this returns."""
        await self._request("DELETE", f"/tokens/{_token_id(token_id)}")

    async def webhook_secrets(self) -> WebhookSecrets:
        """GET /webhook-secrets: the current and previous secrets' creation and expiry, no values."""
        return WebhookSecrets.from_dict((await self._request("GET", "/webhook-secrets")).json())

    async def rotate_webhook_secret(self) -> WebhookSecretRotated:
        """POST /webhook-secrets/rotate: ``.secret`` is the new secret, shown this once; the old one
        signs beside it until ``.previous_expires_at``. Not retried on a dropped connection."""
        r = await self._request("POST", "/webhook-secrets/rotate", retry_dropped=False)
        return WebhookSecretRotated.from_dict(r.json())

    # --- usage (any token, docs/usage.md) -------------------------------------------------------

    async def usage(self, from_: str | date, to: str | date) -> Usage:
        """GET /usage: per UTC day from ``from_`` to ``to`` (both included, at most 366 days), jobs
        submitted, attempts by outcome, bytes stored, rendered pages, batches and crawls, with totals."""
        params = {"from": _day(from_), "to": _day(to)}
        return Usage.from_dict((await self._request("GET", "/usage", params=params)).json())

    # --- webhook deliveries (docs/webhooks.md) ------------------------------------------------

    async def webhook_deliveries(
        self, *, status: str | None = None, job: JobRef | None = None, limit: int = 500
    ) -> AsyncIterator[WebhookDelivery]:
        """Every webhook delivery of the tenant (newest first), filtered by ``status`` (pending,
        delivered, failed, skipped) and ``job``; walks the cursor one page at a time."""
        params: dict[str, Any] = {"limit": limit}
        if status is not None:
            params["status"] = status
        if job is not None:
            params["job"] = _core.job_id_of(job)
        while True:
            page = (await self._request("GET", "/webhook-deliveries", params=params)).json()
            for item in page["items"]:
                yield WebhookDelivery.from_dict(item)
            if not page.get("next_cursor"):
                return
            params["cursor"] = page["next_cursor"]

    async def redeliver(self, delivery: int | WebhookDelivery) -> None:
        """POST /webhook-deliveries/{id}/redeliver: sent again now, the same webhook-id, a new
        signature."""
        await self._request("POST", f"/webhook-deliveries/{_delivery_id(delivery)}/redeliver")

    async def disabled_callbacks(self) -> list[DisabledCallback]:
        """GET /disabled-callbacks: the receiver URLs a 410 switched off."""
        r = await self._request("GET", "/disabled-callbacks")
        return [DisabledCallback.from_dict(d) for d in r.json()["items"]]

    async def enable_callback(self, callback: int | DisabledCallback) -> None:
        """POST /disabled-callbacks/{id}/enable: later deliveries to the URL are sent again."""
        await self._request("POST", f"/disabled-callbacks/{_delivery_id(callback)}/enable")

    async def wait_loaded(self, batch_id: str, timeout: float | None = None) -> Batch:
        """The batch once ``loaded`` (its rows are jobs); BatchFailed if it failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.2
        while True:
            current = await self.batch(batch_id)
            if current.status == "loaded":
                return current
            if current.status == "failed":
                raise BatchFailed(current)
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(current)
            await asyncio.sleep(pause)
            pause = min(pause * 1.5, 2.0)

    async def batch_job_ids(self, batch: Batch) -> list[str | None]:
        """The batch's job ids by row (index 0 is row 1); None for a rejected row."""
        ids: list[str | None] = [None] * batch.total
        async for job in self.jobs(batch=batch.id):
            if job.batch_row is not None:
                ids[job.batch_row - 1] = job.id
        return ids

    async def submit_many(
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
                    ids.append((await self.submit(row.pop("url"), **row)).id)
                except (InvalidRequest, ApiError) as exc:
                    if isinstance(exc, ApiError) and exc.status_code != 400:
                        raise
                    ids.append(None)
                    rejected.append({"row": n, "errors": exc.fields})
            if rejected:
                raise RowsRejected(ids, rejected)
            return [i for i in ids if i is not None]
        receipt = await self.submit_batch(prepared)
        loaded = await self.wait_loaded(receipt.id, timeout=timeout)
        ids = await self.batch_job_ids(loaded)
        if loaded.rejected:
            raise RowsRejected(ids, [r.raw for r in loaded.rejected_rows])
        missing = [n for n, i in enumerate(ids, 1) if i is None]
        if missing:
            raise ScrapejobsError(f"batch {loaded.id}: no job for rows {missing[:5]}")
        return [i for i in ids if i is not None]
