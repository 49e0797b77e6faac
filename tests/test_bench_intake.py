"""bench/intake.py's open loop: it reads its settings, and it counts each request's
latency from its scheduled send time, so a server that falls behind shows its queue (no
coordinated omission) while the client still sends on time."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from bench import intake
from scrapejobs.processes import ROOT

# Starts web servers (the whole suite's, not the fast loop's); an open loop's queue is a matter of time:
# out of the parallel phase (make test's serial phase).
pytestmark = [pytest.mark.e2e, pytest.mark.serial]


def test_the_benchmark_reads_its_settings() -> None:
    env = dict(os.environ, BENCH_INTAKE_OPEN_RATE="45", BENCH_INTAKE_ROUNDS="2", BENCH_INTAKE_SECONDS="3")
    probe = "import bench.intake as b; print(b.OPEN_RATE, b.ROUNDS, b.MEASURE_S)"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.stdout.split() == ["45.0", "2", "3.0"], done.stderr
    defaults = {k: v for k, v in os.environ.items() if not k.startswith("BENCH_INTAKE_")}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, env=defaults, capture_output=True, text=True
    )
    assert done.stdout.split() == ["300.0", "3", "10.0"], done.stderr


class _Slow(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(0.05)  # one request at a time: at most 20 answers per second
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


class _SerialServer(HTTPServer):
    request_queue_size = 256


def test_a_server_slower_than_the_rate_shows_its_queue_in_the_open_loop(monkeypatch) -> None:
    server = _SerialServer(("127.0.0.1", 0), _Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setattr(intake, "OPEN_RATE", 40.0)  # twice what the server can answer
        monkeypatch.setattr(intake, "MEASURE_S", 1.0)
        monkeypatch.setattr(intake, "WARMUP_S", 0.0)
        figures = intake._open(server.server_address[1], "token")
    finally:
        server.shutdown()
        server.server_close()
    assert figures["errors"] == 0
    # The client kept to its schedule (a loaded machine may delay a send by a few ms, never by the
    # queue's second)...
    assert figures["max_send_lag_ms"] < 150, figures
    # ...so the 40 requests due in the second queue behind a server doing 20 a second: the last
    # waits about a second, although each took 50 ms to serve (a closed loop would say 50 ms).
    assert figures["p99_ms"] > 600, figures
    assert figures["p50_ms"] > 200, figures
