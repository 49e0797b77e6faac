"""Bodies and headers a hostile client sends, through the real web process (NFR-33,
docs/limits.md): refused unread when the method or the token rules them out, cut with 408 when
they trickle, connections past the worker's cap refused, and a tenant's batch uploads in flight
bounded by its share of spool space; other clients are served meanwhile."""

from __future__ import annotations

import json
import os
import socket

import pytest
import requests

from apps.batches.models import Batch
from apps.jobs.models import Job
from tests.intake.test_request_bodies_e2e import _pieces, _read_answer, exchange
from tests.support.net import free_port
from tests.support.procs import wait_for, wait_for_web

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TIMEOUT_S = 2  # body and header timeouts of the web process under test


@pytest.fixture
def start_web(services):
    def start(**env: str) -> int:
        port = free_port()
        settings = {
            "SCRAPEJOBS_REQUEST_BODY_TIMEOUT_S": str(TIMEOUT_S),
            "SCRAPEJOBS_REQUEST_HEADER_TIMEOUT_S": str(TIMEOUT_S),
            **env,
        }
        proc = services(**settings).start("web", port=port, workers=1)
        wait_for_web(proc, port)
        start.proc = proc  # type: ignore[attr-defined]
        return port

    return start


def _request(
    port: int, method: str, path: str, *, token: str | None, length: int, kind: str = "application/json"
) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}"
        f"Content-Type: {kind}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def _served(port: int, token: str) -> bool:
    answer = requests.get(
        f"http://127.0.0.1:{port}/api/v1/jobs", headers={"Authorization": f"Bearer {token}"}, timeout=10
    )
    return answer.status_code == 200


def test_a_body_the_method_or_the_token_rules_out_is_refused_before_a_byte_of_it_is_read(
    start_web, make_tenant
):
    """No byte of the body is sent: had the server waited for it, the answer would be the body
    timeout's 408."""
    port = start_web()
    _, token, _ = make_tenant()
    # PUT on /batches once had the batch limit (256 MiB): now the 1 MiB of every other request.
    answer = exchange(port, _request(port, "PUT", "/api/v1/batches", token=None, length=200 << 20), [])
    assert (answer.status, answer.json()["code"]) == (413, "payload_too_large"), answer.body
    for method in ("PUT", "PATCH", "DELETE"):
        answer = exchange(port, _request(port, method, "/api/v1/batches", token=None, length=500_000), [])
        assert answer.status == 401, (method, answer.body)
        assert answer.headers["connection"] == "close"
        answer = exchange(port, _request(port, method, "/api/v1/batches", token=token, length=500_000), [])
        assert answer.status == 405, (method, answer.body)
        assert answer.headers["connection"] == "close"
    answer = exchange(port, _request(port, "POST", "/api/v1/jobs", token=None, length=500_000), [])
    assert answer.status == 401, answer.body
    assert _served(port, token)
    assert Job.objects.count() == 0


def test_a_body_that_trickles_is_cut_with_408_while_others_are_served(start_web, make_tenant):
    port = start_web()
    _, token, _ = make_tenant()
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        sock.sendall(_request(port, "POST", "/api/v1/jobs", token=token, length=100) + b'{"url": ')
        assert _served(port, token)  # another client, on another connection, meanwhile
        status, headers, body = _read_answer(sock)
    finally:
        sock.close()
    assert status == 408, body
    assert json.loads(body)["code"] == "request_timeout"
    assert headers["connection"] == "close"
    assert Job.objects.count() == 0


def test_headers_that_trickle_are_cut_with_408_while_others_are_served(start_web, make_tenant):
    port = start_web()
    _, token, _ = make_tenant()
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        sock.sendall(f"GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: ".encode())
        assert _served(port, token)
        status, _, body = _read_answer(sock)
    finally:
        sock.close()
    assert (status, json.loads(body)["code"]) == (408, "request_timeout"), body


def test_a_connection_past_the_workers_cap_is_refused_with_503_and_served_once_one_closes(
    start_web, make_tenant
):
    cap = 6
    port = start_web(SCRAPEJOBS_WEB_MAX_CONNECTIONS=str(cap), SCRAPEJOBS_REQUEST_HEADER_TIMEOUT_S="60")
    _, token, _ = make_tenant()
    idle = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(cap)]
    try:
        answer = exchange(
            port,
            f"GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n".encode(),
            [],
        )
        assert (answer.status, answer.json()["code"]) == (503, "too_many_connections"), answer.body
        assert answer.headers["retry-after"] == "1"
    finally:
        for sock in idle:
            sock.close()
    wait_for(lambda: _served(port, token), what="a request once the idle connections are gone")


def _rows(count: int, pad: int) -> bytes:
    return "".join(
        json.dumps({"url": f"http://a.example/{i}/{'p' * pad}"}) + "\n" for i in range(count)
    ).encode()


def _spooled(session: int) -> list[int]:
    """The sizes of the unnamed (deleted) files the processes of ``session`` hold open: the web
    component's process group, whose batch bodies are spooled to such files, unbuffered, so a
    file's size is the bytes charged to its tenant's share (scrapejobs/bodies.py)."""
    sizes = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.getsid(int(pid)) != session:
                continue
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}").endswith(" (deleted)"):
                    sizes.append(os.stat(f"/proc/{pid}/fd/{fd}").st_size)
        except OSError:  # a process or descriptor gone meanwhile
            continue
    return sizes


def test_a_tenants_uploads_in_flight_past_its_spool_share_are_503_while_another_tenant_uploads(
    start_web, make_tenant
):
    batch_max = 1 << 20
    port = start_web(
        SCRAPEJOBS_REQUEST_BODY_TIMEOUT_S="120",
        SCRAPEJOBS_BATCH_MAX_BYTES=str(batch_max),
        SCRAPEJOBS_BATCH_SPOOL_TENANT_BYTES=str(batch_max),  # one batch in flight
    )
    web = start_web.proc  # type: ignore[attr-defined]
    _, token_a, _ = make_tenant()
    _, token_b, _ = make_tenant()
    big = _rows(900, 1000)  # about 0.9 MiB
    assert len(big) < batch_max
    small = _rows(300, 1000)  # about 0.3 MiB: with the big one, past 1 MiB in flight
    ndjson = "application/x-ndjson"

    held = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        held.sendall(_request(port, "POST", "/api/v1/batches", token=token_a, length=len(big), kind=ndjson))
        held.sendall(big[:-10])  # all but its last bytes: in flight, in the spool
        # Sent is not yet taken: the share is full once the web process has spooled those bytes.
        wait_for(lambda: len(big) - 10 in _spooled(web.pid), what="the held upload's bytes in its spool file")
        refused = exchange(
            port,
            _request(port, "POST", "/api/v1/batches", token=token_a, length=len(small), kind=ndjson),
            _pieces(small, 65536),
        )
        assert (refused.status, json.loads(refused.body)["code"]) == (503, "spool_full"), refused.body[:500]
        assert int(refused.headers["retry-after"]) >= 1
        assert len(big) - 10 in _spooled(web.pid)  # the held upload was not the one refused
        # Another tenant's upload is taken meanwhile.
        other = exchange(
            port,
            _request(port, "POST", "/api/v1/batches", token=token_b, length=len(small), kind=ndjson),
            _pieces(small, 65536),
        )
        assert other.status == 202, other.body[:500]
        held.sendall(big[-10:])
        status, _, body = _read_answer(held)
        assert status == 202, body[:500]
    finally:
        held.close()
    # The share is handed back with the request: A's next upload is taken.
    again = exchange(
        port,
        _request(port, "POST", "/api/v1/batches", token=token_a, length=len(small), kind=ndjson),
        _pieces(small, 65536),
    )
    assert again.status == 202, again.body[:500]
    assert Batch.objects.count() == 3
