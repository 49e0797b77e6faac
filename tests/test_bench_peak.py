"""The pure parts of bench/peak.py (bench/peak_plan.py) and bench/capacity.py (NFR-17, NFR-18), and the two pieces they
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
from bench.peak_plan import (
    Host,
    Measured,
    bottleneck,
    ladder,
    layout,
    limits,
    log_limits,
    worker_connections,
)
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


def test_the_ladder_climbs_1_2_5_10_up_to_the_multiple_asked() -> None:
    assert ladder(1) == [1]
    assert ladder(2) == [1, 2]
    assert ladder(10) == [1, 2, 5, 10]
    assert ladder(3) == [1, 2, 3]  # a multiple off the ladder is its last rung
    assert ladder(20) == [1, 2, 5, 10, 20]


def test_the_layout_follows_littles_law_one_worker_per_core_at_least() -> None:
    seed = layout(rate=28, target_s=20, max_threads=1000, cores=2)
    assert (seed.workers, seed.threads, seed.db_pool) == (2, 294, 20)  # 588 slots: 560 x 1.05
    tenfold = layout(rate=280, target_s=20, max_threads=1000, cores=2)
    assert (tenfold.workers, tenfold.threads, tenfold.db_pool) == (6, 980, 10)
    assert tenfold.slots >= 280 * 20 * 1.05
    assert layout(rate=140, target_s=20, max_threads=1000, cores=2).workers == 3
    assert layout(rate=28, target_s=20, max_threads=100, cores=2).workers == 6  # the old layout
    assert layout(rate=1, target_s=1, max_threads=1000, cores=1).slots == 2
    # Fewer connections to share: fewer each, never none.
    assert layout(rate=280, target_s=20, max_threads=1000, cores=2, worker_connections=30).db_pool == 5
    assert layout(rate=280, target_s=20, max_threads=1000, cores=2, worker_connections=0).db_pool == 1


def _host(**changes: object) -> Host:
    values: dict = dict(
        threads_free=30_000,
        threads_limit="kernel.pid_max (32,768, 2,000 in use)",
        fd_limit=20_000,
        pg_connections_free=97,
        pg_max_connections=100,
        redis_maxclients=10_000,
        redis_clients=5,
        mem_available_mib=20_000.0,
    )
    return Host(**{**values, **changes})


def test_a_rung_past_this_machines_limits_says_which_before_it_runs() -> None:
    # A server's default max_connections (100, 97 for clients): the workers get 52, 8 each.
    assert worker_connections(97) == 52 and worker_connections(200) == 60 and worker_connections(40) == 0
    tenfold = layout(rate=280, target_s=20, max_threads=1000, cores=2, worker_connections=52)
    assert tenfold.db_pool == 8
    assert limits(tenfold, _host(), in_flight=5600) == []
    (fds,) = limits(tenfold, _host(fd_limit=1024), in_flight=5600)
    assert fds.startswith("file descriptors:") and "ulimit -n is 1,024" in fds
    (threads,) = limits(tenfold, _host(threads_free=4000), in_flight=5600)
    assert threads.startswith("threads:") and "kernel.pid_max" in threads
    (pg,) = limits(tenfold, _host(pg_connections_free=60), in_flight=5600)
    assert pg.startswith("postgres connections:") and "max_connections 100" in pg
    starved = layout(
        rate=280, target_s=20, max_threads=1000, cores=2, worker_connections=worker_connections(50)
    )
    assert limits(starved, _host(pg_connections_free=50), in_flight=5600)[0].startswith(
        "postgres connections:"
    )
    (redis,) = limits(tenfold, _host(redis_maxclients=4064), in_flight=5600)
    assert redis.startswith("redis clients:")
    (memory,) = limits(tenfold, _host(mem_available_mib=3000.0), in_flight=5600)
    assert memory.startswith("memory:")


def _measured(**changes: object) -> Measured:
    values: dict = dict(
        cores=2,
        wall_s=200.0,
        cpu_s={"worker": 200.0, "web": 100.0, "postgres": 60.0},
        machine_busy_share=0.5,
        mem_available_min_mib=18_000.0,
        mem_total_mib=24_000.0,
        intake_p99_ms=50.0,
        intake_aim_ms=200.0,
        intake_failed=0,
        started_share=0.99,
        started_aim=0.95,
        succeeded=1000,
        submitted=1000,
        waiting_while_free_s=0,
        slots=5880,
        in_flight_max=5600,
        log_limits=(),
        exited=(),
    )
    return Measured(**{**values, **changes})


def test_a_failed_rung_names_its_bottleneck_from_what_was_measured() -> None:
    kind, why = bottleneck(_measured(machine_busy_share=0.97, started_share=0.5))
    assert kind == "CPU (worker)" and "CPU 0.97 of 2 cores x 200 s busy (0.90 this benchmark's" in why
    assert (
        bottleneck(_measured(machine_busy_share=0.97, cpu_s={"worker": 50.0}))[0] == "CPU (other processes)"
    )
    kind, why = bottleneck(_measured(started_share=0.5, waiting_while_free_s=40, in_flight_max=2000))
    assert kind == "dispatcher" and "40 s while worker slots were free" in why
    assert bottleneck(_measured(started_share=0.5))[0] == "worker slots"
    assert bottleneck(_measured(intake_p99_ms=900.0))[0] == "intake"
    assert bottleneck(_measured(mem_available_min_mib=500.0, machine_busy_share=0.97))[0] == "memory"
    assert bottleneck(_measured(exited=("worker3",)))[0] == "process exited"
    assert bottleneck(_measured(succeeded=990))[0] == "jobs failed"
    found = log_limits(
        {"worker0": "psycopg.OperationalError: FATAL: sorry, too many clients already", "web": ""}
    )
    assert found == ("postgres max_connections (a process's log: too many clients) in worker0",)
    assert bottleneck(_measured(log_limits=found)) == ("postgres max_connections", found[0])


def test_the_capacity_worker_is_the_services_worker_with_its_pool_replaced() -> None:
    argv = worker_argv(1000, "gevent")
    assert argv[argv.index("--pool") + 1] == "gevent"
    assert argv[argv.index("--concurrency") + 1] == "1000"
    assert "--queues" in argv and "jobs.high,jobs.normal,jobs.low" in argv


def test_the_benchmarks_read_their_settings() -> None:
    probe = (
        "import bench.peak as p, bench.capacity as c; "
        "print(p.RATE, p.SECONDS, p.TARGET_S, p.THREADS, p.MULTIPLE, p.WORKER_NICE, c.LEVELS, c.TARGET_S, c.MEASURE_S, c.POOL)"
    )
    env = dict(
        os.environ,
        BENCH_PEAK_RATE="280",
        BENCH_PEAK_SECONDS="30",
        BENCH_PEAK_TARGET_S="2",
        BENCH_PEAK_THREADS="500",
        BENCH_PEAK_MULTIPLE="10",
        BENCH_PEAK_WORKER_NICE="0",
        BENCH_CAPACITY_LEVELS="10,20",
        BENCH_CAPACITY_TARGET_S="1",
        BENCH_CAPACITY_SECONDS="5",
        BENCH_CAPACITY_POOL="gevent",
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.stdout.split() == [
        "280.0",
        "30.0",
        "2.0",
        "500",
        "10",
        "0",
        "[10,",
        "20]",
        "1.0",
        "5.0",
        "gevent",
    ], done.stderr
    defaults = {k: v for k, v in os.environ.items() if not k.startswith("BENCH_")}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=defaults, capture_output=True, text=True
    )
    assert done.stdout.split() == [
        "28.0",
        "180.0",
        "20.0",
        "1000",
        "1",
        "10",
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
