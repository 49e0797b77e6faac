"""The broker transport's saving (scrapejobs/broker.py, NFR-11): a channel builds one redis-py
client per connection pool instead of one per call, and that one client serves every thread.
Against the real Redis broker of the test settings."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from kombu import Connection

from scrapejobs.broker import Channel
from scrapejobs.celery import app


def _channel() -> tuple[Connection, Any]:
    conn = app.connection_for_write()
    channel = conn.default_channel
    assert isinstance(channel, Channel), type(channel)
    return conn, channel


def test_a_channel_builds_one_client_per_pool_and_a_new_one_for_a_new_pool() -> None:
    conn, channel = _channel()
    try:
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second
            assert first.ping()
        old_pool = channel.pool
        channel._disconnect_pools()  # what kombu does when the connection broke
        with channel.conn_or_acquire() as third:
            assert third is not first and third.connection_pool is not old_pool
            assert third.ping()
        # The event loop's client is still kombu's own, built each time.
        assert channel._create_client(asynchronous=True) is not channel._create_client(asynchronous=True)
    finally:
        conn.release()


def test_the_shared_client_keeps_every_threads_unacknowledged_messages_exactly() -> None:
    """What a worker of 100 threads does with it: each received message is recorded in the unacked
    set and removed on its acknowledgement, from many threads at once through the one client."""
    conn, channel = _channel()
    qos: Any = channel.qos
    message = channel.prepare_message("body")
    message["properties"].update(delivery_info={"exchange": "", "routing_key": "sj-test"}, delivery_tag="t")
    received = channel.Message(message, channel=channel)
    tags = [f"sj-test-{uuid.uuid4()}" for _ in range(400)]
    errors: list[BaseException] = []

    def run(part: list[str], *, ack: bool) -> None:
        try:
            for tag in part:
                if ack:
                    qos._remove_from_indices(tag).execute()
                else:
                    qos.append(received, tag)
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    def in_threads(*, ack: bool) -> None:  # 8: kombu's pool holds at most 10 connections
        threads = [threading.Thread(target=run, args=(tags[i::8],), kwargs={"ack": ack}) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    client = channel._create_client()
    try:
        in_threads(ack=False)
        assert not errors, errors
        assert all(client.hexists(qos.unacked_key, t) for t in tags)
        assert all(client.zscore(qos.unacked_index_key, t) is not None for t in tags)
        in_threads(ack=True)
        assert not errors, errors
        assert not any(client.hexists(qos.unacked_key, t) for t in tags)
        assert not any(client.zscore(qos.unacked_index_key, t) is not None for t in tags)
    finally:
        with client.pipeline() as pipe:
            pipe.hdel(qos.unacked_key, *tags).zrem(qos.unacked_index_key, *tags).execute()
        conn.release()
