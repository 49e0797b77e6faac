"""What every benchmark needs: a throwaway database on the given server, the service's processes,
a local target, and figures printed as ``name: figure`` lines.

Benchmarks read ``DATABASE_URL`` and ``REDIS_URL`` (``make bench`` starts embedded servers and sets
them). Each benchmark creates its own database on that PostgreSQL server (``bench_<name>``), a copy
of a template migrated once per tree (``migrated_template_<digest>``, kept on the server), drops it at
the end, and uses Redis databases N, N+1 (the broker) and N+2 of ``REDIS_URL``, which it empties
first.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from urllib3.util.wait import wait_for_read

ROOT = Path(__file__).resolve().parent.parent


def figure(name: str, value: float | int | str, unit: str = "") -> None:
    """One result line: ``name: figure``; also appended at full precision to ``BENCH_FIGURES_FILE``
    when set: bench/__main__.py sets it and writes the run's figures to bench/results/<name>.json
    (docs/benchmarks.md), a benchmark's child processes' figures included."""
    sink = os.environ.get("BENCH_FIGURES_FILE")
    if sink:
        with open(sink, "a") as f:
            f.write(json.dumps([name, value]) + "\n")
    if isinstance(value, float):
        text = f"{value:,.1f}" if abs(value) >= 100 else f"{value:.2f}"
    else:
        text = str(value)
    print(f"{name}: {text}{(' ' + unit) if unit else ''}", flush=True)


def note(text: str) -> None:
    print(f"# {text}", file=sys.stderr, flush=True)


def percentile(values: Sequence[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def littles_law_share(jobs_per_s: float, *, concurrency: int, latency_s: float) -> float:
    """The share of Little's law reached: ``concurrency`` slots each busy ``latency_s`` per job can
    finish at most ``concurrency / latency_s`` jobs per second."""
    return jobs_per_s * latency_s / concurrency


def share_within(values: Sequence[float | None], limit: float, *, of: int | None = None) -> float:
    """The share of ``of`` items (default: all of ``values``) whose value is at most ``limit``;
    a missing value (None: the thing never happened) counts against."""
    total = len(values) if of is None else of
    if not total:
        return float("nan")
    return sum(1 for v in values if v is not None and v <= limit) / total


def rss_mib(pid: int) -> float:
    """Resident memory of one process (``VmRSS``), 0 once it has gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Schedule:
    """An open loop's slots, shared by its client threads: slot ``i`` is due at
    ``first + i * interval``. A free connection takes the next slot, waits for its time and sends;
    when every connection is busy the slot goes out late, and its latency still counts from when it
    was due (no coordinated omission)."""

    def __init__(self, first: float, interval: float, stop: float):
        self.first, self.interval, self.stop = first, interval, stop
        self.next = 0
        self.lock = threading.Lock()

    def take(self) -> float | None:
        with self.lock:
            due = self.first + self.next * self.interval
            self.next += 1
        return due if due < self.stop else None


def post_job(
    conn: http.client.HTTPConnection, port: int, headers: dict[str, str], url: str
) -> tuple[bool, http.client.HTTPConnection]:
    """``POST /api/v1/jobs {url}`` on a keep-alive connection: (accepted, the connection to use
    next, a new one after an error). A connection the server closed while it sat idle (gunicorn's
    keep-alive is 2 s) is replaced before sending, as HTTP client libraries do."""
    if conn.sock is not None and wait_for_read(conn.sock, timeout=0):
        conn.close()  # readable while idle: the server's FIN; the request opens a new one
    try:
        conn.request("POST", "/api/v1/jobs", body=json.dumps({"url": url}), headers=headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status == 202, conn
    except (OSError, http.client.HTTPException):
        conn.close()
        return False, http.client.HTTPConnection("127.0.0.1", port, timeout=30)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _with_path(url: str, path: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=path))


def database_url_named(url: str, name: str) -> str:
    """The same server as ``url``, another database (works for TCP and for the embedded unix-socket
    form ``postgres://user@:PORT/%2Fsocket%2Fdir/dbname``)."""
    path = urlsplit(url).path
    head = path.rsplit("/", 1)[0]
    return _with_path(url, f"{head}/{name}")


def redis_url_db(url: str, offset: int) -> str:
    parts = urlsplit(url)
    db = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{(db + offset) % 16}"))


def _pg_connect(url: str, dbname: str | None = None):  # type: ignore[no-untyped-def]
    import environ
    import psycopg

    cfg = environ.Env.db_url_config(url)
    return psycopg.connect(
        host=cfg["HOST"] or None,
        port=cfg["PORT"] or None,
        user=cfg["USER"] or None,
        password=cfg["PASSWORD"] or None,
        dbname=dbname or cfg["NAME"],
        autocommit=True,
    )


# pg_advisory_lock's key while a template is built: two benchmark runs on one server (make test
# runs two halves side by side) build it once between them.
_TEMPLATE_LOCK_KEY = 0x7363_7261_7065
_TEMPLATE_PREFIX = "migrated_template_"


def migrations_digest() -> str:
    """What a migrated database depends on: every migration file and the pinned requirements."""
    digest = hashlib.sha256()
    for path in [*sorted(ROOT.glob("apps/*/migrations/*.py")), ROOT / "requirements.txt"]:
        digest.update(path.relative_to(ROOT).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def migrated_template(server: str) -> str:
    """The name of a database on ``server`` migrated with this tree's migrations, built the first
    time it is asked for (under an advisory lock) and kept there; templates of other trees are
    dropped then. A benchmark's database is a copy of it (``CREATE DATABASE ... TEMPLATE``): the
    same schema a ``migrate`` makes, without a ``migrate`` per benchmark (3 s each); so is each
    test database (tests/conftest.py, ``django_db_modify_db_settings``)."""
    name = _TEMPLATE_PREFIX + migrations_digest()
    with _pg_connect(server) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_TEMPLATE_LOCK_KEY,))
        try:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
                stale = conn.execute(
                    "SELECT datname FROM pg_database WHERE starts_with(datname, %s)", (_TEMPLATE_PREFIX,)
                ).fetchall()
                for (old,) in stale:
                    conn.execute(f'DROP DATABASE IF EXISTS "{old}" WITH (FORCE)')
                building = f"{name}_building"
                conn.execute(f'CREATE DATABASE "{building}"')
                manage(
                    "migrate", "--noinput", "-v", "0", env=service_env(database_url_named(server, building))
                )
                conn.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_TEMPLATE_LOCK_KEY,))
    return name


@contextmanager
def throwaway_database(name: str) -> Iterator[str]:
    """Create ``bench_<name>`` on DATABASE_URL's server as a copy of the migrated template, yield
    its URL, drop it."""
    server = os.environ.get("DATABASE_URL")
    if not server:
        raise SystemExit("DATABASE_URL is not set (make bench sets it)")
    dbname = f"bench_{name}"
    template = migrated_template(server)
    with _pg_connect(server) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{dbname}" TEMPLATE "{template}"')
    url = database_url_named(server, dbname)
    try:
        yield url
    finally:
        with _pg_connect(server) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


@contextmanager
def in_process_database(name: str) -> Iterator[str]:
    """``throwaway_database(name)`` for a benchmark that runs the service's code in this process:
    DATABASE_URL names it meanwhile, and so do Django's settings when an earlier benchmark of the
    same run set Django up already (settings are read once per process: the browser benchmarks
    run one after the other, and the second found the first's dropped database)."""
    with throwaway_database(name) as db:
        server = os.environ["DATABASE_URL"]
        os.environ["DATABASE_URL"] = db
        from django.conf import settings  # noqa: PLC0415 - only the in-process benchmarks need it

        ready = settings.configured
        if ready:
            _django_connections_close()
            named = settings.DATABASES["default"]
            before = named["NAME"]
            named["NAME"] = f"bench_{name}"  # throwaway_database's, on the same server
        try:
            yield db
        finally:
            _django_connections_close()
            os.environ["DATABASE_URL"] = server
            if ready:
                named["NAME"] = before


def _django_connections_close() -> None:
    """Every connection of this process closed, and the pool too (SCRAPEJOBS_DB_POOL: a pool
    keeps the database it was made for; the next one is made from the settings as they are)."""
    from django.db import connections  # noqa: PLC0415

    connections.close_all()
    close_pool = getattr(connections["default"], "close_pool", None)
    if close_pool is not None:
        close_pool()


def sql(url: str, query: str, params: Sequence[object] = ()) -> list[tuple]:
    with _pg_connect(url) as conn:
        return conn.execute(query, params).fetchall()  # type: ignore[arg-type]


def flush_redis() -> None:
    import redis

    base = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    for offset in (0, 1, 2):
        redis.Redis.from_url(redis_url_db(base, offset)).flushdb()


def service_env(database_url: str, **overrides: str) -> dict[str, str]:
    """The environment of a service process for a benchmark: its own database, no rate limits,
    local targets allowed, quiet logs."""
    redis_base = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    env = dict(os.environ)
    env.pop("CELERY_BROKER_URL", None)  # the broker follows REDIS_URL (next database)
    env.update(
        DATABASE_URL=database_url,
        REDIS_URL=redis_base,
        DJANGO_SETTINGS_MODULE="settings.base",
        DJANGO_SECRET_KEY=os.environ.get("DJANGO_SECRET_KEY") or "bench-only-secret-key",
        SCRAPEJOBS_RATE_LIMIT_PER_SECOND="0",
        # The benchmark measures the pipeline against one local target: no per-domain politeness.
        SCRAPEJOBS_DOMAIN_DEFAULT_RPS="1000000",
        SCRAPEJOBS_DOMAIN_DEFAULT_BURST="1000000",
        SCRAPEJOBS_DOMAIN_DEFAULT_CONCURRENCY="1000000",
        SCRAPEJOBS_ALLOW_PRIVATE_TARGETS="true",
        SCRAPEJOBS_LOG_LEVEL="WARNING",
        SCRAPEJOBS_RESULTS_DIR=str(Path(tempfile.gettempdir()) / "scrapejobs-bench-results"),
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides)
    return env


def manage(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def create_tenant(env: dict[str, str], name: str = "bench") -> tuple[str, str]:
    """(tenant id, token) of a new tenant in the benchmark's database."""
    lines = dict(
        line.split(": ", 1) for line in manage("create_tenant", name, env=env).splitlines() if ": " in line
    )
    return lines["tenant"], lines["token"]


class Proc:
    """A background process in its own group, its output in a log file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str]):
        self.name = name
        self.terminated = False
        self.log = Path(tempfile.mkstemp(prefix=f"bench-{name}-", suffix=".log")[1])
        with open(self.log, "wb") as out:
            self.p = subprocess.Popen(
                argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def terminate(self) -> None:
        """SIGTERM to the process group, once: a shutdown begun, not waited for (``stop`` waits). A
        second SIGTERM would be a second shutdown begun inside the first."""
        if self.p.poll() is None and not self.terminated:
            self.terminated = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.p.pid, signal.SIGTERM)

    def stop(self, timeout: float = 15) -> None:
        if self.p.poll() is None:
            self.terminate()
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait()
        self.log.unlink(missing_ok=True)


@contextmanager
def running(*procs: Proc) -> Iterator[tuple[Proc, ...]]:
    """The processes, stopped together at the end: every one is sent SIGTERM (the last started
    first), then each is waited for, so their shutdowns overlap instead of adding up."""
    try:
        yield procs
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            p.stop()


def celery_ready(proc: Proc) -> bool:
    """Whether a Celery worker process has said it is ready; raises with its output if it exited."""
    if proc.p.poll() is not None:
        raise RuntimeError(f"{proc.name} exited:\n{proc.output()[-3000:]}")
    return " ready." in proc.output()


def wait_until(pred: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout}s waiting for {what}")


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return 200 <= r.status < 500
    except urllib.error.HTTPError as e:
        return e.code < 500
    except OSError:
        return False


def start_target() -> tuple[Proc, str]:
    """A local target server in its own process (tests/support/target.py): ``/bytes/N`` answers N
    fixed bytes. Its own process, so that serving it does not share the GIL with the benchmark."""
    proc = Proc("target", [sys.executable, "-m", "bench.common", "target"], dict(os.environ))
    wait_until(lambda: "http://" in proc.output(), 10, "the target")
    base = proc.output().split()[0]
    wait_until(lambda: http_ok(base + "/bytes/1"), 10, "the target")
    return proc, base


def start_slow_target() -> tuple[Proc, str]:
    """bench/slow_target.py in its own process: ``/bytes/N?delay=S`` held on an event loop, so
    thousands of slow requests cost the target little; ``/stats`` counts them."""
    proc = Proc("slow-target", [sys.executable, "-m", "bench.slow_target"], dict(os.environ))
    wait_until(lambda: "http://" in proc.output(), 10, "the slow target")
    base = proc.output().split()[0]
    wait_until(lambda: http_ok(base + "/stats"), 10, "the slow target")
    return proc, base


def target_stats(base: str) -> dict[str, int]:
    """The slow target's counters (bench/slow_target.py): requests, answered, in_flight,
    max_in_flight; ``{}`` when it does not answer."""
    try:
        with urllib.request.urlopen(base + "/stats", timeout=5) as r:
            return dict(json.loads(r.read()))
    except (OSError, ValueError):
        return {}


def _serve_target() -> None:
    from tests.support.target import TargetServer

    class QuietTarget(TargetServer):
        request_queue_size = 1024

        def log(self, *args: object) -> None:  # no request log: it would only grow
            pass

    server = QuietTarget()
    print(server.base_url, flush=True)
    server.serve_forever()


if __name__ == "__main__" and sys.argv[1:2] == ["target"]:
    _serve_target()
