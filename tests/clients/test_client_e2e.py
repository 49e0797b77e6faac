"""The Python client against the real service (FR-24, docs/client.md): a thousand jobs in one
call, the per-token limit ridden out, a submit retried after a dropped connection, typed errors,
and the AsyncClient's same surface."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import threading
import uuid

import httpx
import pytest
from scrapejobs_client import (
    AsyncClient,
    BadRequest,
    Client,
    Conflict,
    IdempotencyMismatch,
    InvalidRequest,
    NotFound,
    WaitTimeout,
)

from apps.jobs.models import Job
from tests.support.target import body_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


@pytest.mark.timeout(600)
def test_a_thousand_jobs_in_one_call_are_waited_for_walked_and_one_downloaded_with_its_sha256(
    stack, target, tmp_path
):
    s = stack(worker_concurrency=40)
    rows = [{"url": target.url(f"/bytes/{100 + i}"), "max_attempts": 2} for i in range(1000)]
    with Client(s.base_url, s.token) as sj:
        ids = sj.submit_many(rows)

        assert len(ids) == len(set(ids)) == 1000
        jobs = [sj.wait(job_id, timeout=300) for job_id in ids]
        assert {j.status for j in jobs} == {"succeeded"}
        # Row order: each id is the job of its row (its URL, its batch row).
        assert [j.url for j in jobs] == [r["url"] for r in rows]
        assert [j.batch_row for j in jobs] == list(range(1, 1001)) and len({j.batch for j in jobs}) == 1
        walked = [j.id for j in sj.jobs(batch=jobs[0].batch)]
        assert sorted(walked) == sorted(ids)  # the cursor walk: no job twice, none skipped
        assert len([j for j in sj.jobs(status="succeeded", limit=7)]) >= 1000

        meta = sj.download(ids[123], tmp_path / "body")
        data = (tmp_path / "body").read_bytes()
        assert data == body_for(223) and meta.sha256 == hashlib.sha256(data).hexdigest()
        assert sj.result_bytes(ids[5]) == body_for(105)
        assert [a.outcome for a in sj.attempts(ids[0])] == ["succeeded"]


def test_errors_are_typed_with_the_apis_type_code_and_fields(stack, target):
    s = stack(worker_concurrency=2)
    with Client(s.base_url, s.token) as sj:
        with pytest.raises(InvalidRequest) as local:
            sj.submit("ftp://example.com/", priority="urgent", bogus=1)
        assert set(local.value.fields) == {"url", "priority", "bogus"}
        assert Job.objects.count() == 0  # refused before sending

        with pytest.raises(BadRequest) as refused:
            sj.submit("http://exa mple.com/")  # passes the client's check, not the server's
        assert refused.value.status_code == 400 and refused.value.code and "url" in refused.value.fields

        with pytest.raises(NotFound) as missing:
            sj.get(str(uuid.uuid4()))
        assert missing.value.type and missing.value.code

        slow = sj.submit(target.url("/slow?delay=30"), max_attempts=1, timeout_s=60)
        with pytest.raises(Conflict):
            sj.result(slow)
        with pytest.raises(WaitTimeout) as waited:
            sj.wait(slow, timeout=1.5)
        assert waited.value.job.status in ("queued", "running")
        assert sj.cancel(slow).status in ("cancelled", "running")
        assert sj.wait(slow, timeout=60).status == "cancelled"

        receipt = sj.submit_batch([{"url": target.url(f"/slow?delay=30&b={n}")} for n in range(3)])
        loaded = sj.wait_loaded(receipt.id, timeout=60)
        stopped = sj.cancel_batch(loaded.id)
        assert stopped.id == loaded.id and stopped.cancelled + stopped.cancel_requested == 3

        key = f"k-{uuid.uuid4()}"
        first = sj.submit(target.url("/bytes/10"), idempotency_key=key)
        assert sj.submit(target.url("/bytes/10"), idempotency_key=key).id == first.id
        with pytest.raises(IdempotencyMismatch) as reused:
            sj.submit(target.url("/bytes/11"), idempotency_key=key)
        assert reused.value.status_code == 422


class CountingTransport(httpx.HTTPTransport):
    """What the server answered, every time (the client's retries included)."""

    def __init__(self) -> None:
        super().__init__()
        self.statuses: list[int] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        self.statuses.append(response.status_code)
        return response


def test_a_429_from_the_per_token_limit_is_ridden_out(stack, target):
    s = stack(worker_concurrency=2, rate_limit=3, SCRAPEJOBS_RATE_LIMIT_BURST="3")
    transport = CountingTransport()
    with Client(s.base_url, s.token, transport=transport, max_retries=20) as sj:
        created = [sj.submit(target.url(f"/bytes/{n}")).id for n in range(15)]

    assert len(set(created)) == 15 == Job.objects.filter(tenant=s.tenant).count()
    assert transport.statuses.count(429) > 0, transport.statuses  # the limit did answer 429
    assert transport.statuses.count(202) == 15


class AnswerDroppingProxy:
    """Forwards to the web process; the first ``drop`` requests reach it whole but their answer
    never comes back (the connection is closed once the server starts answering): what a client
    sees when a connection drops after the request was sent."""

    def __init__(self, upstream_port: int, drop: int = 1):
        self.upstream_port, self.drop = upstream_port, drop
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.dropped = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
        try:
            while True:
                chunk = upstream.recv(65536)
                if not chunk:
                    break
                if self.dropped < self.drop:
                    self.dropped += 1
                    break  # the answer is lost
                client.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (client, upstream):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass

    def close(self) -> None:
        self.listener.close()


def test_a_submit_retried_after_a_dropped_connection_makes_one_job(stack, target):
    s = stack(worker_concurrency=2)
    proxy = AnswerDroppingProxy(s.port, drop=1)
    try:
        with Client(f"http://127.0.0.1:{proxy.port}", s.token) as sj:
            created = sj.submit(target.url("/bytes/42"))
    finally:
        proxy.close()

    assert proxy.dropped == 1  # the first answer was lost: the client asked again
    assert list(Job.objects.filter(tenant=s.tenant).values_list("id", flat=True)) == [uuid.UUID(created.id)]


def test_the_async_client_has_the_same_surface(stack, target, tmp_path):
    s = stack(worker_concurrency=10)

    async def run() -> None:
        async with AsyncClient(s.base_url, s.token) as sj:
            one = await sj.submit(target.url("/bytes/64"))
            many = await sj.submit_many([target.url(f"/bytes/{n}") for n in range(1, 6)])
            done = await asyncio.gather(*(sj.wait(i, timeout=60) for i in [one.id, *many]))
            assert [j.status for j in done] == ["succeeded"] * 6
            assert (await sj.result_bytes(one)) == body_for(64)
            meta = await sj.download(many[2], tmp_path / "b")
            assert (tmp_path / "b").read_bytes() == body_for(3) and meta.size == 3
            listed = [j.id async for j in sj.jobs(status="succeeded", limit=2)]
            assert sorted(listed) == sorted([one.id, *many])
            assert len(await sj.attempts(one)) == 1
            with pytest.raises(NotFound):
                await sj.get(str(uuid.uuid4()))

    asyncio.run(run())
