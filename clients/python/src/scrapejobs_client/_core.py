"""What the sync and the async client share: checking a job before it is sent, the retry rules,
turning answers into models or exceptions. No I/O here."""

from __future__ import annotations

import email.utils
import os
import random
import re
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from scrapejobs_client._models import (
    CRAWL_FIELDS,
    CRAWL_SCOPES,
    JOB_FIELDS,
    JOB_REQUIRED,
    Crawl,
    Job,
    JobCreated,
)
from scrapejobs_client.errors import ApiError, InvalidRequest, error_for

FINAL_STATUSES = frozenset(("succeeded", "failed", "cancelled", "erased"))
# A crawl is running until every page is final and read (docs/crawls.md).
CRAWL_ENDED = frozenset(("completed", "cancelled"))
# Answers worth asking again, after their Retry-After (FR-24): the per-token limit, a restart.
RETRY_STATUSES = frozenset((429, 503))
# The longest ?wait= the API holds an answer for.
MAX_WAIT_S = 30
# Never sleep longer than this on one Retry-After, however long the server asks for.
MAX_RETRY_AFTER_S = 60.0
DEFAULT_TIMEOUT_S = 60.0
USER_AGENT = "scrapejobs-client-python/0.1"


def settings_from_env(base_url: str | None, token: str | None) -> tuple[str, str]:
    """``base_url`` / ``token``, or SCRAPEJOBS_URL / SCRAPEJOBS_TOKEN from the environment."""
    url = base_url or os.environ.get("SCRAPEJOBS_URL") or ""
    tok = token or os.environ.get("SCRAPEJOBS_TOKEN") or ""
    if not url:
        raise ValueError("no base URL: pass base_url or set SCRAPEJOBS_URL")
    if not tok:
        raise ValueError("no API token: pass token or set SCRAPEJOBS_TOKEN")
    return url.rstrip("/"), tok


def client_headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "User-Agent": USER_AGENT, "Accept": "application/json"}


def job_id_of(job: str | Job | JobCreated | Mapping[str, Any]) -> str:
    if isinstance(job, str):
        return job
    if isinstance(job, Mapping):
        return str(job["id"])
    return job.id


def new_idempotency_key() -> str:
    return f"sjc-{uuid.uuid4()}"


def _check(name: str, value: Any, rule: Mapping[str, Any]) -> list[str]:
    """The constraints of one field, as the OpenAPI document states them (JOB_FIELDS). The URL
    fields are checked for their scheme and length only: the document's pattern is narrower than
    what the API accepts (it leaves out IP literals, which a public one may be)."""
    if value is None:
        return [] if rule.get("nullable") else ["may not be null"]
    kind = rule.get("type")
    problems: list[str] = []
    if kind == "integer" and (not isinstance(value, int) or isinstance(value, bool)):
        return ["must be an integer"]
    if kind == "string" and not isinstance(value, str):
        return ["must be a string"]
    if kind == "object" and not isinstance(value, Mapping):
        return ["must be an object"]
    if "enum" in rule and value not in rule["enum"]:
        problems.append(f"must be one of {', '.join(rule['enum'])}")
    if "minimum" in rule and value < rule["minimum"]:
        problems.append(f"must be at least {rule['minimum']}")
    if "maximum" in rule and value > rule["maximum"]:
        problems.append(f"must be at most {rule['maximum']}")
    if isinstance(value, str):
        if "maxLength" in rule and len(value) > rule["maxLength"]:
            problems.append(f"must be at most {rule['maxLength']} characters")
        if name in ("url", "callback_url"):
            if not re.match(r"^[hH][tT][tT][pP][sS]?://[^\s/?#]", value):
                problems.append("must be an http or https URL")
        elif "pattern" in rule and not re.search(rule["pattern"], value):
            problems.append("contains a character that is not allowed")
    if isinstance(value, Mapping):
        if "maxProperties" in rule and len(value) > rule["maxProperties"]:
            problems.append(f"at most {rule['maxProperties']} entries")
        names, values = rule.get("names", {}), rule.get("values", {})
        for key, item in value.items():
            if not isinstance(item, str):
                problems.append(f"{key}: must be a string")
                continue
            if "pattern" in names and not re.search(names["pattern"], str(key)):
                problems.append(f"{key!r} is not a valid header name")
            if str(key).lower() in names.get("not", {}).get("enum", ()):
                problems.append(f"{key} is set by the fetcher and cannot be given")
            if "maxLength" in values and len(item) > values["maxLength"]:
                problems.append(f"{key}: value too long")
            if "pattern" in values and not re.search(values["pattern"], item):
                problems.append(f"{key}: value contains a line break or NUL")
    return problems


def job_body(url: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON of POST /jobs, checked against the constraints the API enforces: what this
    refuses the API would refuse too (400), so it is refused here, before anything is sent."""
    body = {"url": url, **fields}
    errors: dict[str, list[str]] = {}
    for name in body:
        if name not in JOB_FIELDS:
            errors[name] = ["unknown field"]
    for name in JOB_REQUIRED:
        if body.get(name) is None:
            errors[name] = ["is required"]
    for name, value in body.items():
        if name in JOB_FIELDS and name not in errors:
            problems = _check(name, value, JOB_FIELDS[name])
            if problems:
                errors[name] = problems
    if body.get("body") is not None and body.get("method", "GET") != "POST":
        errors.setdefault("body", []).append("a body is only allowed with method POST")
    if errors:
        raise InvalidRequest(errors)
    return body


def crawl_body(seeds: str | Iterable[str], max_pages: int, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON of POST /crawls. Unknown fields, a seed that is not an http(s) URL and a
    max_pages below 1 are refused here, before sending; the API checks the rest (its 400 names
    the field)."""
    seed_list = [seeds] if isinstance(seeds, str) else list(seeds)
    body: dict[str, Any] = {"seeds": seed_list, "max_pages": max_pages, **fields}
    errors: dict[str, list[str]] = {}
    for name in body:
        if name not in CRAWL_FIELDS:
            errors[name] = ["unknown field"]
    if not seed_list:
        errors["seeds"] = ["at least one seed"]
    bad = [
        s
        for s in seed_list
        if not isinstance(s, str) or not re.match(r"^[hH][tT][tT][pP][sS]?://[^\s/?#]", s)
    ]
    if bad:
        errors["seeds"] = [f"{s!r} must be an http or https URL" for s in bad]
    if not isinstance(max_pages, int) or isinstance(max_pages, bool) or max_pages < 1:
        errors["max_pages"] = ["must be an integer of at least 1"]
    if "scope" in body and body["scope"] not in CRAWL_SCOPES:
        errors["scope"] = [f"must be one of {', '.join(CRAWL_SCOPES)}"]
    if errors:
        raise InvalidRequest(errors)
    return body


def crawl_id_of(crawl: str | Crawl | Mapping[str, Any]) -> str:
    if isinstance(crawl, str):
        return crawl
    if isinstance(crawl, Mapping):
        return str(crawl["id"])
    return crawl.id


def crawl_ended(crawl: Crawl) -> bool:
    return crawl.status in CRAWL_ENDED


def retry_after_s(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


def backoff_s(attempt: int) -> float:
    """Full jitter, 0.25 s doubling, at most 8 s: for dropped connections and for a 429/503 that
    says nothing about when to come back."""
    return random.uniform(0, min(8.0, 0.25 * 2**attempt))


def retry_delay(response: httpx.Response, attempt: int) -> float:
    after = retry_after_s(response)
    if after is None:
        return backoff_s(attempt)
    # Never sooner than the server said; a little jitter on top so retries do not come in step.
    return min(after, MAX_RETRY_AFTER_S) + random.uniform(0, 0.1)


def raise_for(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text[:500]
    raise error_for(response.status_code, body, retry_after_s(response))


def is_final(job: Job) -> bool:
    return job.status in FINAL_STATUSES


def wait_step(remaining: float) -> int:
    """The ?wait= of the next long poll: whole seconds, 1 to 30."""
    return max(1, min(MAX_WAIT_S, int(remaining + 0.999)))


__all__ = ["ApiError", "FINAL_STATUSES"]
