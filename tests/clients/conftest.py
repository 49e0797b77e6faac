"""The real stack for the client's tests: web (ASGI, as deployed), writer, beat and a worker,
started the way every e2e test starts them (tests/support/procs.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from tests.support.net import free_port
from tests.support.procs import wait_for_web


@dataclass
class Stack:
    base_url: str
    token: str
    tenant: object
    port: int


@pytest.fixture
def stack(services, make_tenant) -> Callable[..., Stack]:
    """``stack(worker_concurrency=…, **env)``: the processes up, a tenant and its token."""

    def start(*, worker_concurrency: int = 20, rate_limit: int | None = None, **env: str) -> Stack:
        svc = services(**env).start_all(worker_concurrency=worker_concurrency)
        port = free_port()
        web = svc.start("web", port=port, workers=2)
        tenant, token, _ = make_tenant(rate_limit_per_second=rate_limit)
        wait_for_web(web, port)
        return Stack(f"http://127.0.0.1:{port}", token, tenant, port)

    return start
