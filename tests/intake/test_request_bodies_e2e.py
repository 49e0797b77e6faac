"""Request bodies through the real web process (NFR-1, NFR-2, FR-1 to FR-7).

gunicorn runs with the project's own command line (scrapejobs.processes.web) and every request is
written to a raw socket, so that nothing between the test and gunicorn rewrites it: a 5 MB body
with its Content-Length, a small chunked submission, and a chunked body that streams on past the
limit, which must be answered 413 while the client is still sending.
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterable, Iterator

import pytest
import requests
from django.conf import settings

from apps.jobs.models import Job
from tests.support.net import free_port
from tests.support.procs import wait_for_web

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

LIMIT = settings.SCRAPEJOBS_MAX_REQUEST_BYTES
TOO_LARGE = {
    "type": "invalid_request",
    "code": "payload_too_large",
    "detail": f"The request body is over {LIMIT} bytes.",
}


@pytest.fixture
def web(shared_web, make_tenant) -> tuple[int, str]:
    """(port, token) of the module's running web process, for a tenant of this test's own."""
    _, token, _ = make_tenant()
    return shared_web, token


class Answer:
    def __init__(self, status: int, headers: dict[str, str], body: bytes, sent: int):
        self.status, self.headers, self.body = status, headers, body
        self.sent = sent  # body bytes the client had written when the answer came

    def json(self) -> object:
        return json.loads(self.body)


def exchange(port: int, head: bytes, pieces: Iterable[bytes]) -> Answer:
    """Write ``head`` then ``pieces`` until they run out or the server answers, whichever comes
    first, and read the answer. A server that answers without reading the rest of the body may
    close its side: the client then stops writing, as an HTTP client does."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        sock.sendall(head)
        sent = 0
        for piece in pieces:
            if select.select([sock], [], [], 0)[0]:
                break  # the answer (or the close) is here
            try:
                sock.sendall(piece)
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(piece)
        return Answer(*_read_answer(sock), sent=sent)
    finally:
        sock.close()


def _read_answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        more = sock.recv(65536)
        assert more, f"connection closed before an answer: {data!r}"
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers["content-length"])
    while len(body) < length:
        more = sock.recv(65536)
        assert more, "connection closed in the middle of the answer"
        body += more
    return status, headers, body[:length]


def _head(port: int, token: str, *, path: str = "/api/v1/jobs", length: int | None = None) -> bytes:
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\n{framing}\r\n\r\n"
    ).encode()


def _chunks(data: bytes, size: int) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        piece = data[i : i + size]
        yield b"%x\r\n%s\r\n" % (len(piece), piece)
    yield b"0\r\n\r\n"


def _pieces(data: bytes, size: int) -> Iterator[bytes]:
    return (data[i : i + size] for i in range(0, len(data), size))


def test_a_5_mb_body_with_its_length_is_a_413_with_the_error_body(web):
    port, token = web
    body = json.dumps({"url": "http://a.example", "method": "POST", "body": "x" * (5 << 20)}).encode()
    answer = exchange(port, _head(port, token, length=len(body)), _pieces(body, 65536))
    assert answer.status == 413, answer.body[:500]
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == TOO_LARGE
    assert Job.objects.count() == 0


def test_a_small_chunked_submission_is_accepted(web):
    port, token = web
    body = json.dumps({"url": "http://a.example/chunked"}).encode()
    answer = exchange(port, _head(port, token), _chunks(body, 7))
    assert answer.status == 202, answer.body
    job_id = answer.json()["id"]  # type: ignore[index]
    assert Job.objects.get(id=job_id).url == "http://a.example/chunked"


def test_a_chunked_body_with_broken_framing_is_a_400(web):
    port, token = web
    answer = exchange(port, _head(port, token), [b"5\r\n{}   \r\nzz\r\n"])
    assert answer.status == 400, answer.body
    assert answer.json() == {  # not a validation error about an empty body, not a 500
        "type": "invalid_request",
        "code": "parse_error",
        "detail": "The request body could not be read.",
    }
    assert Job.objects.count() == 0


def test_a_chunked_body_streaming_past_the_limit_is_a_413_before_it_ends(web):
    port, token = web
    total = 64 << 20  # 64 MiB, far past the limit, sent in 64 KiB chunks; never materialised
    chunk = b"x" * 65536

    def endless() -> Iterator[bytes]:
        prefix = b'{"url": "http://a.example", "method": "POST", "body": "'
        yield b"%x\r\n%s\r\n" % (len(prefix), prefix)
        for _ in range(total // len(chunk)):
            yield b"%x\r\n%s\r\n" % (len(chunk), chunk)
            time.sleep(0.001)  # a client streaming, not a flood: the server gets to answer
        yield b'2\r\n"}\r\n0\r\n\r\n'

    answer = exchange(port, _head(port, token), endless())
    assert answer.status == 413, answer.body[:500]
    assert answer.json() == TOO_LARGE
    # The server read the limit and a little more (socket buffers, gunicorn's bounded drain of an
    # unread body): it answered long before the client was done.
    assert answer.sent < 8 * LIMIT, f"{answer.sent} bytes sent before the answer"
    assert Job.objects.count() == 0


def test_a_cancel_with_a_body_over_the_limit_is_a_413_and_cancels_nothing(web):
    port, token = web
    job = requests.post(
        f"http://127.0.0.1:{port}/api/v1/jobs",
        json={"url": "http://a.example"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    assert job.status_code == 202, job.content
    job_id = job.json()["id"]
    body = b"{}" + b" " * (5 << 20)
    path = f"/api/v1/jobs/{job_id}/cancel"
    answer = exchange(port, _head(port, token, path=path, length=len(body)), _pieces(body, 65536))
    assert answer.status == 413, answer.body[:500]
    assert answer.json() == TOO_LARGE
    assert Job.objects.get(id=job_id).status == "queued"


# Every path's body is bounded in the ASGI layer (scrapejobs/asgi.py, NFR-19), before Django reads
# it to a temporary file: the answer comes while the client has sent a small part of what it
# announced, and the connection is closed after it.

ANNOUNCED = 50_000_000_000  # 50 GB
SENT_AT_MOST = 2 << 20  # what the client sends before it reads the answer


def _announcing(port: int, *, path: str, length: int | None, token: str | None = None) -> bytes:
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}"
        f"Content-Type: application/json\r\n{framing}\r\n\r\n"
    ).encode()


def _some_of_it(total: int = SENT_AT_MOST, *, chunked: bool = False) -> Iterator[bytes]:
    piece = b"x" * 65536
    for _ in range(total // len(piece)):
        yield b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece
        # time is the subject: a client that sends its body slowly
        time.sleep(0.001)


@pytest.mark.parametrize("path", ["/api/v1/jobs", "/admin/login/", "/api/v1/batches", "/healthz"])
def test_a_50_gb_content_length_is_a_413_before_the_body_is_sent_on_every_path(web, path):
    port, _ = web
    answer = exchange(port, _announcing(port, path=path, length=ANNOUNCED), _some_of_it())
    assert answer.status == 413, answer.body[:500]
    assert answer.json()["code"] == "payload_too_large"  # type: ignore[index]
    assert answer.headers["connection"] == "close"
    # It answered at all: the client sent 2 MB of the 50 GB and then only read (the server
    # would otherwise be waiting for the rest, and the read would time out).
    assert answer.sent <= SENT_AT_MOST


@pytest.mark.parametrize("path", ["/admin/login/", "/dashboard/", "/api/v1/jobs"])
def test_a_chunked_body_past_the_limit_is_a_413_on_every_path_while_it_streams(web, path):
    port, token = web
    # An API call without a token is a 401 before its body is read (test_hostile_bodies_e2e.py).
    token_or_none = token if path.startswith("/api/") else None
    head = _announcing(port, path=path, length=None, token=token_or_none)
    answer = exchange(port, head, _some_of_it(64 << 20, chunked=True))
    assert answer.status == 413, answer.body[:500]
    assert answer.json()["code"] == "payload_too_large"  # type: ignore[index]
    assert answer.sent < 8 * LIMIT, f"{answer.sent} bytes sent before the answer"


@pytest.mark.parametrize("token", [None, "not-a-token"])
def test_a_batch_without_a_valid_token_is_a_401_before_its_body_is_read(web, token):
    port, _ = web
    announced = settings.SCRAPEJOBS_BATCH_MAX_BYTES - 1  # within the batch limit
    answer = exchange(
        port, _announcing(port, path="/api/v1/batches", length=announced, token=token), _some_of_it()
    )
    assert answer.status == 401, answer.body[:500]
    assert answer.json()["type"] == "authentication_error"  # type: ignore[index]
    assert answer.headers["connection"] == "close"  # the rest of the body is never taken
    assert answer.sent <= SENT_AT_MOST  # of hundreds of MB announced: the answer came without them


def test_a_chunked_batch_past_the_batch_limit_is_a_413_while_it_streams(services, make_tenant):
    port = free_port()
    proc = services(SCRAPEJOBS_BATCH_MAX_BYTES=str(4 << 20)).start("web", port=port, workers=1)
    _, token, _ = make_tenant()
    wait_for_web(proc, port)
    head = _announcing(port, path="/api/v1/batches", length=None, token=token)
    answer = exchange(port, head, _some_of_it(64 << 20, chunked=True))
    assert answer.status == 413, answer.body[:500]
    assert (
        answer.json()["detail"] == f"The request body is over {4 << 20} bytes (SCRAPEJOBS_BATCH_MAX_BYTES)."
    )  # type: ignore[index]
    assert answer.sent < (4 << 20) + 8 * LIMIT


def test_a_chunked_batch_within_the_limit_is_taken_whole(web):
    port, token = web
    rows = "".join(json.dumps({"url": f"http://a.example/{i}"}) + "\n" for i in range(2000)).encode()
    head = (
        f"POST /api/v1/batches HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    answer = exchange(port, head, _chunks(rows, 4096))
    assert answer.status == 202, answer.body[:500]
    assert answer.json()["total"] == 2000  # type: ignore[index]


def test_a_request_target_over_8_kib_is_a_414_and_headers_over_64_kib_a_431_while_others_are_served(web):
    """Refused as they arrive, before the application parses, logs or masks them; a request on
    another connection is answered meanwhile."""
    port, token = web
    long_path = "/api/v1/jobs/" + "a" * 9000
    answer = exchange(port, f"GET {long_path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode(), [])
    assert (answer.status, answer.json()["code"]) == (414, "uri_too_long"), answer.body
    many = "".join(f"X-Filler-{i}: {'v' * 1000}\r\n" for i in range(70))
    answer = exchange(port, f"GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{many}\r\n".encode(), [])
    assert (answer.status, answer.json()["code"]) == (431, "headers_too_large"), answer.body
    # A path just within the limit is the application's to answer (a 404 of the API's), and
    # another client is served as usual.
    within = exchange(
        port,
        f"GET /api/v1/jobs/{'a' * 8000} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n\r\n".encode(),
        [],
    )
    assert within.status in (400, 404), within.body
    ok = exchange(
        port,
        f"GET /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n\r\n".encode(),
        [],
    )
    assert ok.status == 200, ok.body
