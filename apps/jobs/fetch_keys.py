"""A job's fetch key (FR-15, docs/design/single-flight.md): the SHA-256 of its request
fingerprint (method, normalised URL, headers, body hash, a rendered job's browser options) within
the scope that may share it (the tenant, or every sharing tenant) and under the tenant's
robots.txt switch. Jobs with one key share one fetch (``apps.jobs.singleflight``); crawls spell
their pages' URLs by the same normalisation (``normalised_url``).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalised_url(url: str) -> str:
    """The URL as the fingerprint sees it: scheme and host lower-cased, the scheme's default port
    dropped, an empty path made ``/``, the fragment dropped (it never reaches the target). The
    query string is kept exactly as given: servers may read repeated or reordered parameters
    differently, and a shared fetch that answers the wrong question is worse than a second one."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    port = parts.port
    netloc = host if port is None or port == _DEFAULT_PORTS.get(scheme) else f"{host}:{port}"
    if parts.username is not None:
        userinfo = parts.username + (f":{parts.password}" if parts.password is not None else "")
        netloc = f"{userinfo}@{netloc}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


def request_fingerprint(
    *, method: str, url: str, headers: dict[str, str], body: str | None, render: dict[str, Any] | None = None
) -> str:
    """SHA-256 of what decides the target's answer: the method, the normalised URL, every header
    the caller set (names lower-cased, values stripped, sorted: any header may change the answer,
    so none is left out) and the SHA-256 of the body (none and empty are the same request).
    ``render``: a rendered job's browser options (FR-30), which change what is stored; a plain
    job has none, and its fingerprint is what it always was."""
    canonical: dict[str, Any] = {
        "method": method.upper(),
        "url": normalised_url(url),
        "headers": sorted((str(k).lower(), str(v).strip()) for k, v in (headers or {}).items()),
        "body": hashlib.sha256((body or "").encode()).hexdigest(),
    }
    if render is not None:
        canonical["render"] = render
    return hashlib.sha256(json.dumps(canonical, separators=(",", ":")).encode()).hexdigest()


def fetch_key(*, fingerprint: str, tenant_id: uuid.UUID | str, shared: bool, obey_robots: bool) -> str:
    """The fingerprint within the scope that may share it: the tenant's own, or every sharing
    tenant's; and under the tenant's robots.txt switch (FR-15): a body fetched for a tenant allowed
    to ignore robots.txt is never served to one that obeys it, nor the other way round. (The
    domain policy's and the service's switches are the same for every job of a URL.)"""
    scope = "shared" if shared else f"tenant:{tenant_id}"
    robots = "robots:obey" if obey_robots else "robots:ignore"
    return hashlib.sha256(f"{scope}\n{robots}\n{fingerprint}".encode()).hexdigest()


def job_fetch_key(
    *,
    method: str,
    url: str,
    headers: dict[str, str],
    body: str | None,
    render: str,
    browser_options: dict[str, Any] | None,
    tenant_id: uuid.UUID | str,
    share_fetches: bool,
    obey_robots: bool,
) -> str:
    """A job's fetch key from its request and its tenant's two switches: what the decision
    computes from its read, and the worker from the claim of a job that needed no decision."""
    rendered = None if render == "none" else {"render": render, "options": browser_options}
    return fetch_key(
        fingerprint=request_fingerprint(method=method, url=url, headers=headers, body=body, render=rendered),
        tenant_id=tenant_id,
        shared=share_fetches,
        obey_robots=obey_robots,
    )
