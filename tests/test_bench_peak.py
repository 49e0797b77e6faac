"""The pure parts of bench/peak.py and bench/capacity.py (NFR-17, NFR-18), and the two pieces they
stand on: the slow target holds many slow requests at once and counts them, and the open loop's
client survives a server that closes idle keep-alive connections (gunicorn does after 2 s)."""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from bench.capacity import worker_argv
from bench.common import Proc, littles_law_share, percentile, post_job, share_within, target_stats
from bench.peak import worker_db_pool, workers_needed
from scrapejobs.processes import ROOT
from tests.support.procs import wait_for


def test_littles_law_share_is_throughput_over_slots_per_latency() -> None:
    assert littles_law_share(100.0, concurrency=1000, latency_s=10.0) == pytest.approx(1.0)
    assert littles_law_share(27.0, concurrency=300, latency_s=10.0) == pytest.approx(0.9)
    assert littles_law_share(45.0, concurrency=100, latency_s=0.5) == pytest.approx(0.225)


def test_share_within_counts_what_never_happened_against_the_share() -> None:
    assert share_within([1.0, 59.9, 60.0, 61.0], 60.0) == pytest.approx(0.75)
    # A job that never started (None) and a submission never accepted (of= more than listed).
    assert share_within([1.0, None, 2.0], 60.0) == pytest.approx(2 / 3)
    assert share_within([1.0, 2.0], 60.0, of=4) == pytest.approx(0.5)
    assert share_within([], 60.0) != share_within([], 60.0)  # nan: nothing to share


def test_percentile_is_a_value_of_the_sample_at_its_rank() -> None:
    values = list(range(100, 0, -1))  # unordered input
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100 and percentile(values, 0) == 1
    assert percentile([5.0], 99) == 5.0
    assert percentile([], 99) != percentile([], 99)  # nan


def test_workers_follow_littles_law_with_headroom() -> None:
    assert workers_needed(rate=28, target_s=20, threads=100) == 6  # the seed's peak: 588 slots
    assert workers_needed(rate=280, target_s=20, threads=100) == 59
    assert workers_needed(rate=280, target_s=20, threads=1000) == 6
    assert workers_needed(rate=1, target_s=1, threads=100) == 1


def test_more_workers_share_the_servers_connections() -> None:
    assert worker_db_pool(6) == 10  # the seed's layout: 60 connections in all
    assert worker_db_pool(2) == 20 and worker_db_pool(12) == 5
    assert all(n * worker_db_pool(n) <= 60 for n in range(1, 31))


def test_the_capacity_worker_is_the_services_worker_with_its_pool_replaced() -> None:
    argv = worker_argv(1000, "gevent")
    assert argv[argv.index("--pool") + 1] == "gevent"
    assert argv[argv.index("--concurrency") + 1] == "1000"
    assert "--queues" in argv and "jobs.high,jobs.normal,jobs.low" in argv


def test_the_benchmarks_read_their_settings() -> None:
    probe = (
        "import bench.peak as p, bench.capacity as c; "
        "print(p.RATE, p.SECONDS, p.TARGET_S, p.THREADS, c.LEVELS, c.TARGET_S, c.MEASURE_S, c.POOL)"
    )
    env = dict(
        os.environ,
        BENCH_PEAK_RATE="280",
        BENCH_PEAK_SECONDS="30",
        BENCH_PEAK_TARGET_S="2",
        BENCH_PEAK_THREADS="1000",
        BENCH_CAPACITY_LEVELS="10,20",
        BENCH_CAPACITY_TARGET_S="1",
        BENCH_CAPACITY_SECONDS="5",
        BENCH_CAPACITY_POOL="gevent",
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.stdout.split() == ["280.0", "30.0", "2.0", "1000", "[10,", "20]", "1.0", "5.0", "gevent"], (
        done.stderr
    )
    defaults = {k: v for k, v in os.environ.items() if not k.startswith("BENCH_")}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=defaults, capture_output=True, text=True
    )
    assert done.stdout.split() == [
        "28.0",
        "180.0",
        "20.0",
        "100",
        "[100,",
        "300,",
        "1000]",
        "10.0",
        "60.0",
        "threads",
    ], done.stderr


def test_the_slow_target_holds_many_slow_requests_at_once_and_counts_them() -> None:
    proc = Proc("slow-target", [sys.executable, "-m", "bench.slow_target"], dict(os.environ))
    try:
        wait_for(
            lambda: "http://" in proc.output(), timeout=10, interval=0.05, what="the slow target's address"
        )
        base = proc.output().split()[0]
        n, delay = 300, 1.0

        def fetch(i: int) -> bytes:
            with urllib.request.urlopen(f"{base}/bytes/100?n={i}&delay={delay}", timeout=30) as r:
                return r.read()

        started = time.monotonic()
        with ThreadPoolExecutor(n) as pool:
            bodies = list(pool.map(fetch, range(n)))
        elapsed = time.monotonic() - started
        from tests.support.target import body_for

        assert bodies == [body_for(100)] * n
        # time is the subject: served side by side, not one after another (that would take n x delay).
        assert elapsed < 10 * delay, elapsed
        after = target_stats(base)
        assert after["requests"] == after["answered"] == n
        # The target's own count: more than half the requests were waiting there at one moment.
        assert after["in_flight"] == 0 and after["max_in_flight"] > n // 2, after
    finally:
        proc.stop()


class _ClosesAfterEachAnswer(BaseHTTPRequestHandler):
    """Answers 202 as HTTP/1.1 keep-alive, then closes the connection anyway, as a server does
    whose keep-alive timeout passed while the client sat idle."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()
        self.close_connection = True

    def log_message(self, *args: object) -> None:
        pass


def test_the_open_loop_client_replaces_a_connection_the_server_closed_while_idle() -> None:
    server = HTTPServer(("127.0.0.1", 0), _ClosesAfterEachAnswer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        results = []
        for i in range(5):
            ok, conn = post_job(conn, port, {"Content-Type": "application/json"}, f"https://x.example/{i}")
            results.append(ok)
            time.sleep(0.1)  # idle: the server's close arrives
        conn.close()
    finally:
        server.shutdown()
        server.server_close()
    assert results == [True] * 5
