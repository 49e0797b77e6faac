"""Reads about stored results: the time-limited link to a job's body (FR-1 to FR-7)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.core.files.storage import FileSystemStorage
from django.http import HttpRequest
from django.urls import reverse

from apps.jobs.models import Job
from apps.results.links import link_token_make
from apps.results.storage import results_storage, screenshot_key

# FR-5: result links expire, by default after 1 h, at most after 7 days.
MAX_LINK_TTL_S = 7 * 86400


class ResultGone(Exception):
    """The job succeeded but its stored body is no longer there (retention removed it): 410."""


@dataclass(frozen=True)
class ResultLink:
    url: str
    expires_at: datetime


def result_link(*, job: Job, request: HttpRequest | None = None, ttl_s: int | None = None) -> ResultLink:
    """A signed, expiring link to a succeeded job's body; the caller checks the job succeeded.

    Local storage: ``/results/<token>`` made absolute with ``SCRAPEJOBS_PUBLIC_BASE_URL`` when
    set (the address clients use, behind a proxy), else from ``request``. S3: a presigned URL.
    Raises ``ResultGone`` when the job has no stored body or the object was removed."""
    if not job.result_key:
        raise ResultGone(f"job {job.id} has no stored result")
    if job.result_deleted_at is not None:  # retention deleted it (apps/results/storage_retention.py)
        raise ResultGone(f"the result of job {job.id} expired")
    return _object_link(
        key=job.result_key, content_type=job.result_content_type, request=request, ttl_s=ttl_s, job=job
    )


def screenshot_link(
    *, job: Job, request: HttpRequest | None = None, ttl_s: int | None = None
) -> ResultLink | None:
    """The signed link to a rendered job's screenshot (FR-31), or None when it asked for none;
    raises ``ResultGone`` as ``result_link`` does."""
    options = job.browser_options or {}
    if not options.get("screenshot") or not job.result_key:
        return None
    if job.result_deleted_at is not None:
        raise ResultGone(f"the result of job {job.id} expired")
    return _object_link(
        key=screenshot_key(job.result_key), content_type="image/png", request=request, ttl_s=ttl_s, job=job
    )


def _object_link(
    *, key: str, content_type: str | None, request: HttpRequest | None, ttl_s: int | None, job: Job
) -> ResultLink:
    ttl = min(max(int(ttl_s or settings.SCRAPEJOBS_RESULT_LINK_TTL_S), 1), MAX_LINK_TTL_S)
    storage = results_storage()
    # One cheap existence check (a stat, or a HEAD to S3) so a removed body answers 410, not a
    # link that fails later.
    if not storage.exists(key):
        raise ResultGone(f"the result of job {job.id} was removed")
    expires = time.time() + ttl
    if isinstance(storage, FileSystemStorage):
        token = link_token_make(key=key, content_type=content_type, expires_at=expires)
        url = _absolute(reverse("results:download", kwargs={"token": token}), request)
    else:
        # django-storages' S3Storage.url(name, parameters=None, expire=None, http_method=None).
        # The presigned GET asks S3 to answer `Content-Disposition: attachment`, as the local
        # links do: the target's HTML must not render inline under the bucket's origin.
        url = storage.url(  # type: ignore[call-arg]
            key, parameters={"ResponseContentDisposition": "attachment"}, expire=ttl
        )
    return ResultLink(url=url, expires_at=datetime.fromtimestamp(int(expires), tz=UTC))


def _absolute(path: str, request: HttpRequest | None) -> str:
    if settings.PUBLIC_BASE_URL:
        return settings.PUBLIC_BASE_URL + path
    if request is not None:
        return request.build_absolute_uri(path)
    return path
