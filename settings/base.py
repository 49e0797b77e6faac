"""The one settings module. Every value comes from the environment (django-environ); production
differs from development only by environment. Each variable is listed, with its default, in the
docs/settings.md: change both together.

``<repo>/.run/dev/env`` (written by ``make run`` while embedded servers are up) is read for any
variable not already set, so ``python manage.py`` in a second terminal reaches the same servers.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import sys
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
for _envfile in (BASE_DIR / ".env", BASE_DIR / ".run" / "dev" / "env"):
    if _envfile.exists():
        # read_env never overrides a variable that is already set.
        environ.Env.read_env(str(_envfile), overwrite=False)


def _renamed(name: str, old: str) -> str:
    """The variable to read for a setting renamed from ``old`` to ``name``: ``name`` when it is
    set (or neither is), else ``old``, accepted for one release with a warning printed once (settings
    load once per process, before logging is configured)."""
    if name not in os.environ and old in os.environ:
        print(f"warning: {old} is deprecated, read as {name}: set {name} instead", file=sys.stderr)
        return old
    return name


def _bounded_int(name: str, default: int, low: int, high: int) -> int:
    """Read an int setting and fail loudly at start-up when it is out of its range."""
    value = env.int(name, default=default)
    if not low <= value <= high:
        raise environ.ImproperlyConfigured(f"{name}={value} is outside {low}..{high}")
    return value


def _bounded_float(name: str, default: float, low: float, high: float) -> float:
    """Read a float setting and fail loudly at start-up when it is out of its range."""
    value = env.float(name, default=default)
    if not low <= value <= high:
        raise environ.ImproperlyConfigured(f"{name}={value} is outside {low}..{high}")
    return value


def _fraction(name: str, default: float) -> float:
    value = env.float(name, default=default)
    if not 0 < value < 1:
        raise environ.ImproperlyConfigured(f"{name}={value}: expected a fraction between 0 and 1")
    return value


def _proxy_url(name: str) -> str:
    """An egress proxy URL (docs/egress.md): empty (none), or http(s)://[user:password@]host[:port];
    a bad one stops the process, its password never printed."""
    from urllib.parse import urlsplit  # noqa: PLC0415

    value = env.str(name, default="").strip()
    if not value:
        return ""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise environ.ImproperlyConfigured(f"{name}: not a URL with a valid port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise environ.ImproperlyConfigured(
            f"{name}: expected http://[user:password@]host:port or https://..., got scheme "
            f"{parts.scheme!r}, host {parts.hostname!r}"
        )
    return value


def _positive_float(name: str, default: float) -> float:
    value = env.float(name, default=default)
    if value <= 0:
        raise environ.ImproperlyConfigured(f"{name}={value} must be > 0")
    return value


# --- Django core -------------------------------------------------------------------------
DEBUG = env.bool("DJANGO_DEBUG", default=False)
# The directory `make run` keeps its state in (demo token, admin password, the development secret).
SCRAPEJOBS_RUN_DIR = BASE_DIR / env.str("SCRAPEJOBS_RUN_DIR", default=".run/dev")  # relative: to the checkout
# Signs result links, sessions and CSRF tokens: anyone who knows it can forge a result link.
# Without DJANGO_SECRET_KEY the key `make run` generated for this checkout is used
# (<run dir>/secret-key); with neither, a public placeholder that the web, the workers, beat and
# manage.py refuse to start with unless DJANGO_DEBUG is on (apps/operators/checks.py).
_DEV_SECRET_FILE = SCRAPEJOBS_RUN_DIR / "secret-key"
INSECURE_SECRET_KEY = "insecure-placeholder-set-DJANGO_SECRET_KEY"
SECRET_KEY = (
    env.str("DJANGO_SECRET_KEY", default="")
    or (_DEV_SECRET_FILE.read_text().strip() if _DEV_SECRET_FILE.is_file() else "")
    or INSECURE_SECRET_KEY
)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])
# Behind a proxy that terminates TLS: trust its X-Forwarded-Proto, so links in answers (result
# links, Location) are https:// and HSTS applies. Off by default: without such a proxy a client
# could send the header itself.
SCRAPEJOBS_BEHIND_TLS_PROXY = env.bool("SCRAPEJOBS_BEHIND_TLS_PROXY", default=False)
if SCRAPEJOBS_BEHIND_TLS_PROXY:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# Session and CSRF cookies (the admin) only over https: on by default behind a TLS proxy.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env.bool(
    "DJANGO_SECURE_COOKIES", default=SCRAPEJOBS_BEHIND_TLS_PROXY
)
# Strict-Transport-Security on https answers; 0 (the default) sends none. Raise it once https works.
SECURE_HSTS_SECONDS = _bounded_int("DJANGO_SECURE_HSTS_SECONDS", 0, 0, 63_072_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
# Absolute base URL used to build links in API answers when there is no request at hand (webhooks,
# signed result links made by workers). Empty: built from the request.
PUBLIC_BASE_URL = env.str("SCRAPEJOBS_PUBLIC_BASE_URL", default="").rstrip("/")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "apps.jobs",
    "apps.tenants",
    "apps.api",
    "apps.intake",
    "apps.query",
    "apps.publishing",
    "apps.scraping",
    "apps.results",
    "apps.writer",
    "apps.scheduling",
    "apps.webhooks",
    "apps.politeness",
    "apps.operators",
    "apps.exports",
    "apps.batches",
    "apps.crawls",
    "apps.erasure",
]

MIDDLEWARE = [
    # Request count and latency by route, method and status for /metrics (apps/operators).
    "apps.operators.request_metrics.RequestMetricsMiddleware",
    # Under WSGI, a body over SCRAPEJOBS_MAX_REQUEST_BYTES under /api/ is a 413 before anything
    # else runs (scrapejobs/middleware.py); under ASGI scrapejobs/asgi.py bounds every body first.
    "scrapejobs.middleware.RequestBodyLimitMiddleware",
    # Django's security, common and X-Frame-Options middleware, their hooks run on the event loop
    # under ASGI rather than in a thread each (scrapejobs/middleware.py).
    "scrapejobs.middleware.OnTheLoopSecurityMiddleware",
    # Serves /static/ (admin, API docs) from the web process itself: no separate file server to run
    # (WhiteNoise, made usable in an async chain: scrapejobs/middleware.py).
    "scrapejobs.middleware.AsyncWhiteNoiseMiddleware",
    # Sessions, CSRF, user and messages serve the admin and dashboard pages: skipped under /api/
    # (token-authenticated, CSRF-exempt), where they only cost time (scrapejobs/middleware.py).
    "scrapejobs.middleware.BrowserSessionMiddleware",
    "scrapejobs.middleware.OnTheLoopCommonMiddleware",
    "scrapejobs.middleware.BrowserCsrfViewMiddleware",
    "scrapejobs.middleware.BrowserAuthenticationMiddleware",
    "scrapejobs.middleware.BrowserMessageMiddleware",
    "scrapejobs.middleware.OnTheLoopXFrameOptionsMiddleware",
]

ROOT_URLCONF = "scrapejobs.urls"
WSGI_APPLICATION = "scrapejobs.wsgi.application"
ASGI_APPLICATION = "scrapejobs.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

# --- PostgreSQL --------------------------------------------------------------------------
# psycopg 3 with Django's connection pool: persistent connections matter (5.6x on intake, see
# machine notes) and a pool keeps a threaded worker from opening one connection per thread.
DATABASES = {"default": env.db_url("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/scrapejobs")}
DATABASES["default"]["ENGINE"] = "django.db.backends.postgresql"
DATABASES["default"]["CONN_MAX_AGE"] = 0
_pool_max = _bounded_int("SCRAPEJOBS_DB_POOL_MAX_SIZE", 20, 1, 1000)
if env.bool("SCRAPEJOBS_DB_POOL", default=True):
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": 1,
        "max_size": _pool_max,
        "timeout": 30,
    }
# A PostgreSQL that accepts and never answers, or a link that goes silent, must fail a connection
# instead of hanging its process (docs/settings.md, "PostgreSQL and Redis"; NFR-37): libpq's
# connect timeout bounds opening one, TCP keepalives find a silent idle one, and tcp_user_timeout
# drops one whose sent data stays unacknowledged. All three are TCP-only (a unix socket ignores them).
DATABASES["default"].setdefault("OPTIONS", {}).update(
    connect_timeout=_bounded_int("SCRAPEJOBS_DB_CONNECT_TIMEOUT_S", 10, 2, 600),
    keepalives=1,
    keepalives_idle=_bounded_int("SCRAPEJOBS_DB_KEEPALIVES_IDLE_S", 30, 1, 7200),
    keepalives_interval=_bounded_int("SCRAPEJOBS_DB_KEEPALIVES_INTERVAL_S", 10, 1, 600),
    keepalives_count=_bounded_int("SCRAPEJOBS_DB_KEEPALIVES_COUNT", 3, 1, 100),
    tcp_user_timeout=_bounded_int("SCRAPEJOBS_DB_TCP_USER_TIMEOUT_MS", 30_000, 0, 3_600_000),
)
# The hot path's statements run with prepare=True (the claim, the single-flight read, the writer's
# fold: NFR-11) are parsed and planned once per connection. Django turns psycopg's preparing off
# (prepare_threshold None), which makes prepare=True a no-op; a threshold no other statement
# reaches leaves those alone prepared (Django's own queries bind client-side and are never
# prepared). Off: for a pooler that drops prepared statements (PgBouncer before 1.21, or without
# max_prepared_statements; docs/settings.md).
# With them on, the claim is also planned once per connection (its generic plan, apps/jobs/claims.py).
SCRAPEJOBS_DB_PREPARED_STATEMENTS = env.bool("SCRAPEJOBS_DB_PREPARED_STATEMENTS", default=True)
if SCRAPEJOBS_DB_PREPARED_STATEMENTS:
    DATABASES["default"]["OPTIONS"]["prepare_threshold"] = 2**31 - 1
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis / Celery ----------------------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", default="redis://127.0.0.1:6379/0")


def _next_redis_db(url: str) -> str:
    """The broker's default: the same Redis server as REDIS_URL, the next database number, so
    that flushing the broker (or losing its messages) never touches the service's own state."""
    from urllib.parse import urlsplit, urlunsplit  # noqa: PLC0415

    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss"):
        return url
    db = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{(db + 1) % 16}"))


CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=_next_redis_db(REDIS_URL))
CELERY_RESULT_BACKEND = None  # results live in PostgreSQL and object storage, not in Celery
CELERY_TASK_IGNORE_RESULT = True
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_TIMEZONE = "UTC"
# A message is acknowledged after the task ran, and given back if the worker is lost: together
# with the conditional claim this is at-least-once delivery with duplicates made harmless. The
# scrape task is the exception: acknowledged at its start, with the sweeper, not redelivery, as its
# recovery (apps/scraping/tasks.py says why).
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Network bounds (NFR-37, docs/settings.md "PostgreSQL and Redis"): a broker that accepts and never
# answers (a partition, a dead NAT entry) must fail a call, not hang the process that made it. Without
# them kombu's Redis transport waits for ever on a publish (control's publisher, beat, a web process)
# and on a connect. socket_timeout bounds each blocking read or write of a synchronous call; it cannot
# cut a consumer's BRPOP short: kombu sends BRPOP with a server-side timeout of its
# brpop_timeout (1 s) and reads the answer only once the poller says the socket is readable
# (MultiChannelPoller.get / on_readable, kombu/transport/redis.py), so no read waits on an idle
# BRPOP. A BRPOP whose answer never comes (a half-open connection: the read is never ready) is what
# health_check_interval catches: kombu drops a BRPOP connection overdue by more than brpop_timeout +
# health_check_interval (maybe_check_brpop_health) and redis-py PINGs a connection idle that long
# before using it. Keepalives find a dead idle connection on the kernel's side. retry_on_timeout stays
# off: a publish retried after a timeout may be sent twice (kombu then refuses batch publishing).
# When the connection dies, Celery's consumer reconnects (broker_connection_retry, on by default,
# up to broker_connection_max_retries, 100, at growing intervals of at most 30 s: a worker outlives
# about 50 minutes without a broker, then exits for its supervisor to restart it).


def _keepalive_options(idle_s: int) -> dict[int, int]:
    """TCP keepalive: the first probe after ``idle_s`` idle, then every third of it, three unanswered
    probes drop the connection (the options this platform has)."""
    wanted = {"TCP_KEEPIDLE": idle_s, "TCP_KEEPINTVL": max(1, idle_s // 3), "TCP_KEEPCNT": 3}
    return {getattr(socket, name): value for name, value in wanted.items() if hasattr(socket, name)}


# Redis visibility timeout: an unacknowledged message is redelivered after this long. It must be
# longer than the longest task; the sweeper, not redelivery, is what recovers lost work.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": _bounded_int("SCRAPEJOBS_BROKER_VISIBILITY_TIMEOUT_S", 3600, 60, 86400),
    # At least 2 s: longer than kombu's 1 s BRPOP server-side timeout, whatever the poller does.
    "socket_timeout": _bounded_int("SCRAPEJOBS_BROKER_SOCKET_TIMEOUT_S", 30, 2, 3600),
    "socket_connect_timeout": _bounded_int("SCRAPEJOBS_BROKER_CONNECT_TIMEOUT_S", 10, 1, 600),
    "socket_keepalive": True,
    "socket_keepalive_options": _keepalive_options(
        _bounded_int("SCRAPEJOBS_BROKER_KEEPALIVE_IDLE_S", 30, 1, 7200)
    ),
    "health_check_interval": _bounded_int("SCRAPEJOBS_BROKER_HEALTH_CHECK_INTERVAL_S", 25, 1, 3600),
}
# Per-task events (task-sent, -received, -started, -succeeded) let Flower list every task live, at
# three broker round trips per task on the scrape worker's one consumer thread, the thread that
# also fetches and acknowledges every message: with 100 threads on a 500 ms target it held a worker
# to about two thirds of the jobs/s it reaches without them. The jobs ledger (API, admin)
# is the record of every job; worker heartbeats still reach Flower without task events. Switch them
# on to watch tasks in Flower (make run's Flower then asks the workers for them too).
SCRAPEJOBS_TASK_EVENTS = env.bool("SCRAPEJOBS_TASK_EVENTS", default=False)
CELERY_WORKER_SEND_TASK_EVENTS = SCRAPEJOBS_TASK_EVENTS
CELERY_TASK_SEND_SENT_EVENT = SCRAPEJOBS_TASK_EVENTS
# The scrape worker's nice value (0..19; apps/runtime/priority.py): above 0 on a machine the
# worker shares with the web, so that the intake's latency comes first when the cores are busy.
SCRAPEJOBS_WORKER_NICE = _bounded_int("SCRAPEJOBS_WORKER_NICE", 0, 0, 19)

# --- The service -------------------------------------------------------------------------
SCRAPEJOBS_ALLOW_PRIVATE_TARGETS = env.bool("SCRAPEJOBS_ALLOW_PRIVATE_TARGETS", default=False)


def _networks(name: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    raw = env.str(name, default="")
    try:
        return tuple(ipaddress.ip_network(part.strip()) for part in raw.split(",") if part.strip())
    except ValueError as e:
        raise environ.ImproperlyConfigured(f"{name}: {e}") from None


# Networks a target may be in although private targets are refused (apps/outbound/addresses.py):
# comma-separated CIDRs, e.g. an internal site the operator means to scrape. Empty by default.
SCRAPEJOBS_ALLOWED_TARGET_NETWORKS = _networks("SCRAPEJOBS_ALLOWED_TARGET_NETWORKS")
# Requests per second per API token (token bucket, burst = 2x); 0 disables the limit.
SCRAPEJOBS_RATE_LIMIT_PER_SECOND = _bounded_int("SCRAPEJOBS_RATE_LIMIT_PER_SECOND", 50, 0, 100000)
SCRAPEJOBS_RATE_LIMIT_BURST = _bounded_int("SCRAPEJOBS_RATE_LIMIT_BURST", 100, 1, 1000000)
# Without Redis the limit cannot be checked: let requests through (false, NFR-1) or refuse them (429).
SCRAPEJOBS_RATE_LIMIT_FAIL_CLOSED = env.bool("SCRAPEJOBS_RATE_LIMIT_FAIL_CLOSED", default=False)
# The pages that need no token (the OpenAPI schema and its docs page), per client address.
SCRAPEJOBS_OPEN_RATE_LIMIT_PER_SECOND = _bounded_int("SCRAPEJOBS_OPEN_RATE_LIMIT_PER_SECOND", 2, 0, 100000)
SCRAPEJOBS_OPEN_RATE_LIMIT_BURST = _bounded_int("SCRAPEJOBS_OPEN_RATE_LIMIT_BURST", 20, 1, 1000000)
# Seconds a web process remembers a valid API token (one database round trip less per request);
# also how long a revoked token may still work in other processes. 0: look up every request.
SCRAPEJOBS_TOKEN_CACHE_S = _bounded_int("SCRAPEJOBS_TOKEN_CACHE_S", 5, 0, 300)
# Live (neither revoked nor expired) API tokens a tenant may hold; POST /tokens past it is 409
# token_limit_reached (FR-36, docs/tokens.md).
SCRAPEJOBS_TENANT_MAX_TOKENS = _bounded_int("SCRAPEJOBS_TENANT_MAX_TOKENS", 20, 1, 10_000)
# How often beat writes the tokens' last use, kept in Redis by each request, to the database
# (FR-36): GET /tokens also reads what is not written yet.
SCRAPEJOBS_TOKEN_LAST_USED_FLUSH_S = _bounded_int("SCRAPEJOBS_TOKEN_LAST_USED_FLUSH_S", 60, 1, 86_400)
SCRAPEJOBS_MAX_REQUEST_BYTES = _bounded_int("SCRAPEJOBS_MAX_REQUEST_BYTES", 1_048_576, 1024, 1 << 30)
# A request's body must be all in this long after its headers, or it is cut with 408 (NFR-33,
# scrapejobs/asgi.py); its headers this long after its first byte (scrapejobs/web_worker.py).
SCRAPEJOBS_REQUEST_BODY_TIMEOUT_S = _positive_float("SCRAPEJOBS_REQUEST_BODY_TIMEOUT_S", 30.0)
SCRAPEJOBS_REQUEST_HEADER_TIMEOUT_S = _positive_float("SCRAPEJOBS_REQUEST_HEADER_TIMEOUT_S", 10.0)
# Connections one web worker process holds open; one more is answered 503 and closed (NFR-33).
SCRAPEJOBS_WEB_MAX_CONNECTIONS = _bounded_int("SCRAPEJOBS_WEB_MAX_CONNECTIONS", 1000, 1, 100_000)
# Django's own bound on a body it holds in memory (request.body, form data), the admin's included:
# the same number, so that Django never holds a body larger than the API accepts.
DATA_UPLOAD_MAX_MEMORY_SIZE = SCRAPEJOBS_MAX_REQUEST_BYTES
SCRAPEJOBS_IDEMPOTENCY_TTL_HOURS = _bounded_int("SCRAPEJOBS_IDEMPOTENCY_TTL_HOURS", 24, 24, 24 * 365)
# Backlog caps per tenant (FR-20, apps/tenants/backlog.py; a tenant's admin page may set its own):
# queued jobs (a batch's rows count in full before it is accepted) and batches received but not
# yet loaded; past either, POST answers 429 with Retry-After. 0: no cap.
SCRAPEJOBS_TENANT_MAX_QUEUED_JOBS = _bounded_int(
    "SCRAPEJOBS_TENANT_MAX_QUEUED_JOBS", 2_000_000, 0, 100_000_000
)
SCRAPEJOBS_TENANT_MAX_BATCHES_IN_PROGRESS = _bounded_int(
    "SCRAPEJOBS_TENANT_MAX_BATCHES_IN_PROGRESS", 5, 0, 10_000
)
# How long a web process trusts its count of a tenant's queued jobs (plus what it accepted since)
# before counting again: one bounded count per tenant per this many seconds, not one per POST.
SCRAPEJOBS_TENANT_BACKLOG_RECOUNT_S = _bounded_int("SCRAPEJOBS_TENANT_BACKLOG_RECOUNT_S", 5, 0, 60)
SCRAPEJOBS_TENANT_BACKLOG_RETRY_AFTER_S = _bounded_int("SCRAPEJOBS_TENANT_BACKLOG_RETRY_AFTER_S", 30, 1, 3600)

# Worker: how many fetches one worker process holds at once (threads; a fetch mostly waits).
SCRAPEJOBS_WORKER_CONCURRENCY = _bounded_int("SCRAPEJOBS_WORKER_CONCURRENCY", 100, 1, 2000)
# Fetch limits (a job may lower timeout_s; the byte cap and redirect limit are operator-wide).
SCRAPEJOBS_FETCH_CONNECT_TIMEOUT_S = _positive_float("SCRAPEJOBS_FETCH_CONNECT_TIMEOUT_S", 10.0)
SCRAPEJOBS_FETCH_MAX_BYTES = _bounded_int("SCRAPEJOBS_FETCH_MAX_BYTES", 50 * 1024 * 1024, 1, 1 << 40)
SCRAPEJOBS_FETCH_MAX_REDIRECTS = _bounded_int("SCRAPEJOBS_FETCH_MAX_REDIRECTS", 5, 0, 30)
SCRAPEJOBS_FETCH_USER_AGENT = env.str("SCRAPEJOBS_FETCH_USER_AGENT", default="scrapejobs/1.0")
# Egress proxies (FR-28, docs/egress.md): target fetches and robots.txt (a domain policy may name
# another or none), and webhook deliveries, each through an HTTP CONNECT proxy when set.
SCRAPEJOBS_EGRESS_PROXY = _proxy_url("SCRAPEJOBS_EGRESS_PROXY")
SCRAPEJOBS_WEBHOOK_EGRESS_PROXY = _proxy_url("SCRAPEJOBS_WEBHOOK_EGRESS_PROXY")

# Leases: a running job's worker renews its lease every LEASE_S / 3.
# SCRAPEJOBS_LEASE_SECONDS is its old name, still read when this one is not set.
SCRAPEJOBS_LEASE_S = _bounded_int(_renamed("SCRAPEJOBS_LEASE_S", "SCRAPEJOBS_LEASE_SECONDS"), 60, 2, 3600)
# Storing a body may take this long after the job's timeout_s (an S3 upload of a large body). An
# upload still running then is given up (the attempt fails temporarily, `storage_error`), and the
# worker stops renewing the lease of an attempt older than timeout_s plus this, wherever it is
# stuck, so the sweeper takes the job back.
SCRAPEJOBS_STORAGE_ALLOWANCE_S = _bounded_int("SCRAPEJOBS_STORAGE_ALLOWANCE_S", 60, 1, 3600)
# Publisher and sweeper cadences (beat).
SCRAPEJOBS_PUBLISH_INTERVAL_S = _positive_float("SCRAPEJOBS_PUBLISH_INTERVAL_S", 1.0)
SCRAPEJOBS_PUBLISH_BATCH_SIZE = _bounded_int("SCRAPEJOBS_PUBLISH_BATCH_SIZE", 500, 1, 10000)
# Dispatch (NFR-5, NFR-9/NFR-10): the publisher chooses the order in which work starts, so the
# broker is kept shallow: at most this many scrape messages wait in the three queues (workers'
# reserved messages not counted). 300 is about one second of a worker process's measured throughput
# (235-330 jobs/s): enough that workers never run dry between two publisher runs even if a nudge is
# lost and only beat's 1 s tick refills, small enough that a new high job or a new tenant waits
# behind at most about a second of work already committed to the broker.
SCRAPEJOBS_DISPATCH_DEPTH = _bounded_int("SCRAPEJOBS_DISPATCH_DEPTH", 300, 1, 100_000)

# Rendered jobs (FR-30, NFR-31, docs/design/browser.md). Their own free room in the broker (queue
# jobs.browser): a render takes seconds, so a few messages per page slot keep the browser
# component busy without committing the order of a long backlog to the broker.
SCRAPEJOBS_BROWSER_DISPATCH_DEPTH = _bounded_int("SCRAPEJOBS_BROWSER_DISPATCH_DEPTH", 8, 1, 10_000)
# The Chromium the browser component drives (Debian's package; never downloaded at install time).
SCRAPEJOBS_BROWSER_EXECUTABLE = env.str("SCRAPEJOBS_BROWSER_EXECUTABLE", default="/usr/bin/chromium")
# Pages one browser process renders at once (its Celery threads), and how many pages one
# Chromium renders before it is replaced by a fresh one (memory leaks, fragmentation).
SCRAPEJOBS_BROWSER_CONCURRENCY = _bounded_int("SCRAPEJOBS_BROWSER_CONCURRENCY", 2, 1, 64)
SCRAPEJOBS_BROWSER_PAGES_PER_BROWSER = _bounded_int("SCRAPEJOBS_BROWSER_PAGES_PER_BROWSER", 100, 1, 100_000)
# Chromium's own sandbox. On in production (the image runs it as a non-root user); Chromium
# refuses to start sandboxed as root, so root development machines and the tests turn it off.
SCRAPEJOBS_BROWSER_SANDBOX = env.bool("SCRAPEJOBS_BROWSER_SANDBOX", default=True)


def _priority_weights(name: str, default: str) -> dict[str, int]:
    """``high,normal,low`` weights, each at least 1 (a zero weight would starve that priority)."""
    raw = env.str(name, default=default)
    try:
        weights = [int(part) for part in raw.split(",")]
    except ValueError:
        weights = []
    if len(weights) != 3 or not all(1 <= w <= 1000 for w in weights):
        raise environ.ImproperlyConfigured(
            f"{name}={raw!r}: expected three integers 1..1000 (high,normal,low)"
        )
    return dict(zip(("high", "normal", "low"), weights, strict=True))


# Shares of started work per priority under saturation (NFR-9: six of ten from high,
# three from normal, one from low); an empty priority's share goes to the others.
SCRAPEJOBS_PRIORITY_WEIGHTS = _priority_weights("SCRAPEJOBS_PRIORITY_WEIGHTS", "6,3,1")
SCRAPEJOBS_SWEEP_INTERVAL_S = _positive_float("SCRAPEJOBS_SWEEP_INTERVAL_S", 60.0)
# A job published but not taken within this long is published again (lost broker messages).
SCRAPEJOBS_REPUBLISH_AFTER_S = _bounded_int("SCRAPEJOBS_REPUBLISH_AFTER_S", 300, 1, 86400)
# The sweeper leaves expired leases alone while an older receipt waits for the writer (it may be
# theirs, the writer only behind), but a receipt waiting longer than this no longer holds back
# the sweep of other jobs (its own job is still kept): a receipt deferred again and again, or a
# database away that long, must not stop every lost attempt from being swept (apps/writer/selectors.py).
SCRAPEJOBS_SWEEP_RECEIPT_WAIT_MAX_S = _positive_float("SCRAPEJOBS_SWEEP_RECEIPT_WAIT_MAX_S", 300.0)
# Retry backoff: full jitter, uniform(0, min(cap, base * 2**(attempt-1))).
SCRAPEJOBS_RETRY_BASE_S = _positive_float("SCRAPEJOBS_RETRY_BASE_S", 2.0)
SCRAPEJOBS_RETRY_CAP_S = _positive_float("SCRAPEJOBS_RETRY_CAP_S", 600.0)
# Graceful stop: a worker told to stop (SIGTERM) finishes what it runs for this long, then gives
# the jobs it still holds back to the queue (attempt recorded as lost) and exits. Keep it below
# the supervisor's kill timeout (Kubernetes: terminationGracePeriodSeconds, 30 s by default).
SCRAPEJOBS_WORKER_SHUTDOWN_GRACE_S = _positive_float("SCRAPEJOBS_WORKER_SHUTDOWN_GRACE_S", 25.0)

# Politeness per target domain (NFR-5): the limits of a domain without a policy in the
# admin, shared by every worker. 2 requests/s is below what a small site notices (crawl-delay
# conventions are 1-10 s per request for a single crawler) yet serves 7,200 jobs an hour; a burst of
# 5 lets a handful of jobs start at once after a quiet spell and absorbs the publisher's 1 s ticks.
# 4 in flight: by Little's law the cap only binds when the target takes over 2 s per answer (4 / 2
# per s), i.e. when it is already struggling, which is when to ease off. Raise them per domain.
SCRAPEJOBS_DOMAIN_DEFAULT_RPS = _positive_float("SCRAPEJOBS_DOMAIN_DEFAULT_RPS", 2.0)
SCRAPEJOBS_DOMAIN_DEFAULT_BURST = _bounded_int("SCRAPEJOBS_DOMAIN_DEFAULT_BURST", 5, 1, 1_000_000)
SCRAPEJOBS_DOMAIN_DEFAULT_CONCURRENCY = _bounded_int("SCRAPEJOBS_DOMAIN_DEFAULT_CONCURRENCY", 4, 1, 1_000_000)

# Adaptive politeness, robots.txt and domain grouping (apps/politeness). A domain's rate
# adapts below its policy's rate, shared by every worker in Redis: halved when more than
# ADAPTIVE_BAD_SHARE of its last ADAPTIVE_WINDOW answers were 429/503 or timeouts, raised again by
# one policy rate per ADAPTIVE_RECOVERY_S while it answers (additive), never below the policy's
# floor (or ADAPTIVE_FLOOR_RPS). A 1 % error rate never cuts it; one in five does. Off: only
# Retry-After slows a domain down.
SCRAPEJOBS_DOMAIN_ADAPTIVE = env.bool("SCRAPEJOBS_DOMAIN_ADAPTIVE", default=True)
SCRAPEJOBS_DOMAIN_ADAPTIVE_WINDOW = _bounded_int("SCRAPEJOBS_DOMAIN_ADAPTIVE_WINDOW", 100, 20, 10_000)
SCRAPEJOBS_DOMAIN_ADAPTIVE_BAD_SHARE = _fraction("SCRAPEJOBS_DOMAIN_ADAPTIVE_BAD_SHARE", 0.1)
SCRAPEJOBS_DOMAIN_ADAPTIVE_FLOOR_RPS = _positive_float("SCRAPEJOBS_DOMAIN_ADAPTIVE_FLOOR_RPS", 0.05)
SCRAPEJOBS_DOMAIN_ADAPTIVE_RECOVERY_S = _positive_float("SCRAPEJOBS_DOMAIN_ADAPTIVE_RECOVERY_S", 30.0)
# robots.txt (RFC 9309) is obeyed unless switched off here, per domain policy or per tenant. A
# host's file is fetched once per TTL (24 h, the RFC's longest) by one worker for all; a 5xx or an
# unreachable host disallows everything for ROBOTS_UNAVAILABLE_S, after which it is asked again.
SCRAPEJOBS_ROBOTS_OBEY = env.bool("SCRAPEJOBS_ROBOTS_OBEY", default=True)
SCRAPEJOBS_ROBOTS_TTL_S = _bounded_int("SCRAPEJOBS_ROBOTS_TTL_S", 86400, 1, 86400)
SCRAPEJOBS_ROBOTS_UNAVAILABLE_S = _bounded_int("SCRAPEJOBS_ROBOTS_UNAVAILABLE_S", 60, 1, 86400)
# A hostile robots.txt is bounded (NFR-22): at most MAX_RULES allow/disallow lines of our group
# apply (the rest are ignored), and a rule counts at most MAX_WILDCARDS '*' (a disallow past it is
# cut there, so it disallows more; an allow past it is dropped). Matching is linear in the path.
SCRAPEJOBS_ROBOTS_MAX_RULES = _bounded_int("SCRAPEJOBS_ROBOTS_MAX_RULES", 2000, 1, 100_000)
# Bytes of parsed robots.txt rules one process keeps (an LRU, apps/politeness/robots.py).
SCRAPEJOBS_ROBOTS_LOCAL_CACHE_BYTES = _bounded_int(
    "SCRAPEJOBS_ROBOTS_LOCAL_CACHE_BYTES", 32 << 20, 64 << 10, 1 << 32
)
SCRAPEJOBS_ROBOTS_MAX_WILDCARDS = _bounded_int("SCRAPEJOBS_ROBOTS_MAX_WILDCARDS", 10, 0, 1000)

# Webhooks (FR-1 to FR-7): delays before each retry of a callback answering non-2xx, +-20% jitter.
# The default is 10 attempts over about 16 hours; after the last one the delivery is failed.
_WEBHOOK_RETRY_DEFAULT = ["10", "30", "120", "600", "1800", "3600", "7200", "14400", "28800"]
SCRAPEJOBS_WEBHOOK_RETRY_SCHEDULE_S = [
    float(x) for x in env.list("SCRAPEJOBS_WEBHOOK_RETRY_SCHEDULE_S", default=_WEBHOOK_RETRY_DEFAULT)
]
if any(x <= 0 for x in SCRAPEJOBS_WEBHOOK_RETRY_SCHEDULE_S):
    raise environ.ImproperlyConfigured("SCRAPEJOBS_WEBHOOK_RETRY_SCHEDULE_S must list delays > 0")
SCRAPEJOBS_WEBHOOK_CONNECT_TIMEOUT_S = _positive_float("SCRAPEJOBS_WEBHOOK_CONNECT_TIMEOUT_S", 3.0)
# Hard bound on one delivery (connect, send, answer): a slow callback costs at most this.
SCRAPEJOBS_WEBHOOK_TIMEOUT_S = _positive_float("SCRAPEJOBS_WEBHOOK_TIMEOUT_S", 10.0)
# Deliveries in flight at once per deliverer run (threads of the `webhooks` task, not workers).
SCRAPEJOBS_WEBHOOK_CONCURRENCY = _bounded_int("SCRAPEJOBS_WEBHOOK_CONCURRENCY", 16, 1, 256)
# The calls one tenant may have in flight of those; 0: half of SCRAPEJOBS_WEBHOOK_CONCURRENCY.
SCRAPEJOBS_WEBHOOK_TENANT_CONCURRENCY = _bounded_int("SCRAPEJOBS_WEBHOOK_TENANT_CONCURRENCY", 0, 0, 256)
# Beat cadence of the end-of-job outbox (final jobs -> deliveries) and of the deliverer.
SCRAPEJOBS_WEBHOOK_INTERVAL_S = _positive_float("SCRAPEJOBS_WEBHOOK_INTERVAL_S", 1.0)
# After a webhook secret rotation the old secret keeps signing beside the new one this long (FR-23).
SCRAPEJOBS_WEBHOOK_SECRET_GRACE_S = _positive_float("SCRAPEJOBS_WEBHOOK_SECRET_GRACE_S", 86400.0)

# Results: signed links.
SCRAPEJOBS_RESULT_LINK_TTL_S = _bounded_int("SCRAPEJOBS_RESULT_LINK_TTL_S", 3600, 1, 7 * 86400)

# --- Write path (FR-W1 to FR-W4) -------------------------------------------
SCRAPEJOBS_DATABASE_WRITER_CONCURRENCY = _bounded_int("SCRAPEJOBS_DATABASE_WRITER_CONCURRENCY", 4, 1, 64)
# FR-W1 to FR-W4's default. A transaction costs about 4 ms of CPU whatever its size (mostly its
# commit's WAL flush): 40 us per receipt at 100, 8 at 500, so a writer that must keep up with a
# large pool does better at 500 (README, "Benchmarks"). A smaller backlog is applied at once either
# way, in one smaller transaction.
SCRAPEJOBS_DATABASE_WRITER_BATCH_SIZE = _bounded_int("SCRAPEJOBS_DATABASE_WRITER_BATCH_SIZE", 100, 1, 10000)
SCRAPEJOBS_DATABASE_WRITER_MAX_ATTEMPTS = _bounded_int("SCRAPEJOBS_DATABASE_WRITER_MAX_ATTEMPTS", 8, 1, 100)
SCRAPEJOBS_DATABASE_WRITER_RETRY_DELAY_SECONDS = _positive_float(
    "SCRAPEJOBS_DATABASE_WRITER_RETRY_DELAY_SECONDS", 5.0
)
SCRAPEJOBS_DATABASE_WRITER_RECLAIM_IDLE_MS = _bounded_int(
    "SCRAPEJOBS_DATABASE_WRITER_RECLAIM_IDLE_MS", 30000, 1, 86_400_000
)
SCRAPEJOBS_DATABASE_WRITER_DEAD_LETTER_MAXLEN = _bounded_int(
    "SCRAPEJOBS_DATABASE_WRITER_DEAD_LETTER_MAXLEN", 10000, 1, 10_000_000
)
SCRAPEJOBS_DATABASE_WRITE_TIMEOUT_SECONDS = _positive_float(
    "SCRAPEJOBS_DATABASE_WRITE_TIMEOUT_SECONDS", 900.0
)
# Beat runs the writer flush this often; one flush drains for at most 0.8x this long.
SCRAPEJOBS_WRITER_FLUSH_INTERVAL_S = _positive_float("SCRAPEJOBS_WRITER_FLUSH_INTERVAL_S", 1.0)
# The control process runs the publisher and the writer when nudged, each kind's runs at least
# this far apart (scrapejobs/nudge_listener.py): fewer, larger runs cost less CPU per job; a
# finished job is folded, and the broker refilled, up to this much later.
SCRAPEJOBS_NUDGE_GAP_S = _bounded_float("SCRAPEJOBS_NUDGE_GAP_S", 0.1, 0.01, 5.0)
# The writer lease lapses this long after its holder's last renewal (a dead writer's successor
# waits at most this long; the holder renews every third of it).
SCRAPEJOBS_WRITER_LEASE_TTL_S = _positive_float("SCRAPEJOBS_WRITER_LEASE_TTL_S", 10.0)

# --- Storage -----------------------------------------------------------------------------
# "local" (default): files under SCRAPEJOBS_RESULTS_DIR served through signed links by the web
# process. "s3": django-storages against AWS or any S3-compatible endpoint, presigned links.
SCRAPEJOBS_STORAGE = env.str("SCRAPEJOBS_STORAGE", default="local")
if SCRAPEJOBS_STORAGE not in ("local", "s3"):
    raise environ.ImproperlyConfigured("SCRAPEJOBS_STORAGE must be 'local' or 's3'")
# Results are stored under <prefix>/<yyyy>/<mm>/<dd>/<job_id>/<attempt> (a shared bucket stays tidy).
SCRAPEJOBS_RESULT_KEY_PREFIX = (
    env.str("SCRAPEJOBS_RESULT_KEY_PREFIX", default="results").strip("/") or "results"
)
SCRAPEJOBS_RESULTS_DIR = Path(env.str("SCRAPEJOBS_RESULTS_DIR", default=str(BASE_DIR / ".run" / "results")))
if SCRAPEJOBS_STORAGE == "s3":
    _results_backend: dict = {
        # S3Storage with network bounds (apps/results/s3.py, NFR-37): a connect and a read timeout
        # for each call, retries in botocore's standard mode, bounded, and TCP keepalives.
        "BACKEND": "apps.results.s3.ResultsS3Storage",
        "OPTIONS": {
            "connect_timeout_s": _positive_float("SCRAPEJOBS_S3_CONNECT_TIMEOUT_S", 10.0),
            "read_timeout_s": _positive_float("SCRAPEJOBS_S3_READ_TIMEOUT_S", 30.0),
            "max_attempts": _bounded_int("SCRAPEJOBS_S3_MAX_ATTEMPTS", 3, 1, 20),
            "bucket_name": env.str("SCRAPEJOBS_S3_BUCKET"),
            "endpoint_url": env.str("SCRAPEJOBS_S3_ENDPOINT_URL", default="") or None,
            "region_name": env.str("SCRAPEJOBS_S3_REGION", default="us-east-1"),
            "access_key": env.str("AWS_ACCESS_KEY_ID", default="") or None,
            "secret_key": env.str("AWS_SECRET_ACCESS_KEY", default="") or None,
            "signature_version": "s3v4",
            "addressing_style": env.str("SCRAPEJOBS_S3_ADDRESSING_STYLE", default="path"),
            "querystring_expire": SCRAPEJOBS_RESULT_LINK_TTL_S,
            "file_overwrite": True,
            "default_acl": None,
        },
    }
else:
    _results_backend = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        # A retried store of the same attempt replaces its file instead of adding a suffix.
        "OPTIONS": {"location": str(SCRAPEJOBS_RESULTS_DIR), "allow_overwrite": True},
    }
# --- Retention and analytics exports (FR-12, FR-13) -----------------------
# A stored result is deleted this many days after it was stored; its job then answers 410 on
# /result and says result_expired. Bodies that never became a result (a lost attempt's, a late
# upload's) are deleted two hours after their attempt ended, whatever this says.
SCRAPEJOBS_RESULT_RETENTION_DAYS = _bounded_int("SCRAPEJOBS_RESULT_RETENTION_DAYS", 30, 1, 36_500)
# Final jobs and their attempts are deleted this many days after they finished (or after
# SCRAPEJOBS_RESULT_RETENTION_DAYS if longer: never before their stored bodies are gone); 0 keeps
# them for ever.
SCRAPEJOBS_JOB_RETENTION_DAYS = _bounded_int("SCRAPEJOBS_JOB_RETENTION_DAYS", 0, 0, 36_500)
# Storage objects deleted (or job rows pruned) per retention transaction.
SCRAPEJOBS_RETENTION_BATCH_SIZE = _bounded_int("SCRAPEJOBS_RETENTION_BATCH_SIZE", 500, 1, 10_000)
# Erasure (FR-53, docs/erasure.md): a batch's jobs are erased this many rows at a time.
SCRAPEJOBS_ERASURE_CHUNK_SIZE = _bounded_int("SCRAPEJOBS_ERASURE_CHUNK_SIZE", 500, 1, 10_000)
# Exports of finished jobs and their attempts go under <prefix>/<since>_<until>/ in the result
# storage, as Parquet parts of at most this many jobs (and those jobs' attempts) each.
SCRAPEJOBS_EXPORT_PREFIX = env.str("SCRAPEJOBS_EXPORT_PREFIX", default="exports").strip("/") or "exports"
# A part is built in memory: at most about 75 MB at 20,000 jobs with two attempts each.
SCRAPEJOBS_EXPORT_PART_ROWS = _bounded_int("SCRAPEJOBS_EXPORT_PART_ROWS", 25_000, 1, 10_000_000)

STORAGES = {
    "default": _results_backend,
    "results": _results_backend,
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / ".run" / "static"

# --- Batches (FR-10: bulk intake through Parquet parts and a manifest) ------
# POST /batches bodies may be this large (the one /api/ path above SCRAPEJOBS_MAX_REQUEST_BYTES)
# and hold this many rows; above either, 413 and nothing is created.
SCRAPEJOBS_BATCH_MAX_BYTES = _bounded_int("SCRAPEJOBS_BATCH_MAX_BYTES", 256 * 1024 * 1024, 1024, 1 << 34)
# Spool space one tenant's batch uploads in flight may hold in one web process (NFR-33): past it,
# 503 with Retry-After. At least one whole batch.
SCRAPEJOBS_BATCH_SPOOL_TENANT_BYTES = max(
    SCRAPEJOBS_BATCH_MAX_BYTES,
    _bounded_int("SCRAPEJOBS_BATCH_SPOOL_TENANT_BYTES", 2 * SCRAPEJOBS_BATCH_MAX_BYTES, 1024, 1 << 36),
)
SCRAPEJOBS_BATCH_MAX_ROWS = _bounded_int("SCRAPEJOBS_BATCH_MAX_ROWS", 1_000_000, 1, 100_000_000)
# Columns of a CSV or Parquet batch (fields of a JSON row); a job has about ten, and a file of
# thousands of columns would be rows of thousands of values each (docs/limits.md).
SCRAPEJOBS_BATCH_MAX_COLUMNS = _bounded_int("SCRAPEJOBS_BATCH_MAX_COLUMNS", 64, 1, 10_000)
# Good rows per Parquet part: the unit of one loader transaction (and of what a killed loader redoes).
SCRAPEJOBS_BATCH_PART_ROWS = _bounded_int("SCRAPEJOBS_BATCH_PART_ROWS", 100_000, 1, 10_000_000)
# The loader's lease on a batch lapses this long after its last renewal (renewed every third).
SCRAPEJOBS_BATCH_LEASE_S = _positive_float("SCRAPEJOBS_BATCH_LEASE_S", 60.0)
# Beat: hand unfinished batches without a live lease to a loader (lost message, dead loader).
SCRAPEJOBS_BATCH_RESUME_INTERVAL_S = _positive_float("SCRAPEJOBS_BATCH_RESUME_INTERVAL_S", 10.0)
# Parts without a manifest (intake died or was refused midway) are removed this long after they
# were written; a batch still `receiving` after it is failed.
SCRAPEJOBS_BATCH_ORPHAN_GRACE_S = _positive_float("SCRAPEJOBS_BATCH_ORPHAN_GRACE_S", 3600.0)
# How many rejected rows GET /batches/{id} lists with their reasons (all of them are counted).
SCRAPEJOBS_BATCH_REJECTED_SHOWN = _bounded_int("SCRAPEJOBS_BATCH_REJECTED_SHOWN", 100, 0, 10_000)

# --- Crawls (FR-39 to FR-41, docs/crawls.md) ---------------------------------
# The highest max_pages a crawl may ask for; above it 400 and nothing is created.
SCRAPEJOBS_CRAWL_MAX_PAGES = _bounded_int("SCRAPEJOBS_CRAWL_MAX_PAGES", 10_000, 1, 1_000_000)
# Beat: read the links of crawl pages that ended, make their jobs, and end finished crawls.
SCRAPEJOBS_CRAWL_EXPAND_INTERVAL_S = _positive_float("SCRAPEJOBS_CRAWL_EXPAND_INTERVAL_S", 2.0)
# The most bytes of one page's stored body read for its links.
SCRAPEJOBS_CRAWL_PAGE_MAX_BYTES = _bounded_int(
    "SCRAPEJOBS_CRAWL_PAGE_MAX_BYTES", 5 * 1024 * 1024, 1024, 1 << 30
)
# The most sitemap documents (robots.txt's, /sitemap.xml, those of an index) one crawl fetches (FR-43).
SCRAPEJOBS_CRAWL_MAX_SITEMAPS = _bounded_int("SCRAPEJOBS_CRAWL_MAX_SITEMAPS", 50, 0, 1000)
# Parts and manifests live under <prefix>/<batch id>/ in the result storage.
SCRAPEJOBS_BATCH_KEY_PREFIX = (
    env.str("SCRAPEJOBS_BATCH_KEY_PREFIX", default="batches").strip("/") or "batches"
)
# --- Operators: dashboard, rollups and /metrics ----------------------------------
# The rollup task folds ended attempts into per-minute tables and records the queue this often;
# the dashboard's charts and /metrics read those tables, never the whole ledger.
SCRAPEJOBS_ROLLUP_INTERVAL_S = _positive_float("SCRAPEJOBS_ROLLUP_INTERVAL_S", 60.0)
# Minute rows older than this are deleted (the 7-day window needs 7); running totals are kept.
SCRAPEJOBS_ROLLUP_RETENTION_DAYS = _bounded_int("SCRAPEJOBS_ROLLUP_RETENTION_DAYS", 8, 7, 3650)
# /metrics answers a request carrying `Authorization: Bearer <this>`; empty: no token accepted.
SCRAPEJOBS_METRICS_TOKEN = env.str("SCRAPEJOBS_METRICS_TOKEN", default="")
# The target domains with series of their own on /metrics (every domain ever fetched would grow it
# without bound); the dashboard shows every domain.
SCRAPEJOBS_METRICS_DOMAINS = [
    d.strip().lower() for d in env.list("SCRAPEJOBS_METRICS_DOMAINS", default=[]) if d.strip()
]
# ...or a request from these networks without a token (comma-separated CIDRs; empty: none). The
# default lets a scraper on the same host (and `make run`) in; behind a reverse proxy on the same
# host every client looks local: set it to empty there and use the token.
SCRAPEJOBS_METRICS_ALLOWED_NETWORKS = env.list(
    "SCRAPEJOBS_METRICS_ALLOWED_NETWORKS", default=["127.0.0.0/8", "::1/128"]
)
# Request counts and latencies are added up in each web process and sent to Redis (one pipeline)
# at most this often, so that /metrics reports every process's requests.
SCRAPEJOBS_REQUEST_METRICS_FLUSH_S = _positive_float("SCRAPEJOBS_REQUEST_METRICS_FLUSH_S", 5.0)

# --- API ---------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["apps.tenants.authentication.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["apps.tenants.authentication.TokenScopePermission"],
    "DEFAULT_THROTTLE_CLASSES": ["apps.tenants.throttling.TokenRateThrottle"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    # drf-spectacular's, unchanged; importing it registers the bearer token's extension where a
    # schema is built, and only there (apps/api/schema.py, NFR-42).
    "DEFAULT_SCHEMA_CLASS": "apps.api.schema.AutoSchema",
    "EXCEPTION_HANDLER": "apps.api.errors.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "scrapejobs API",
    "DESCRIPTION": "Submit scrape jobs, follow them, and fetch their results through signed links.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SCHEMA_PATH_PREFIX": "/api/v1",
    # Two choice sets named "scope": each its own schema name (the client's models use them).
    "ENUM_NAME_OVERRIDES": {
        "TokenScopeEnum": "apps.tenants.models.TokenScope",
        "CrawlScopeEnum": "apps.crawls.models.CrawlScope",
        "CrawlStatusEnum": "apps.crawls.models.CrawlStatus",
    },
    # The constraints intake enforces that the serializers cannot state (apps/intake/schema.py).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "apps.intake.schema.constraints_hook",
    ],
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

# --- Operators' admin and logs ----------------------------------------------------
# Times with seconds everywhere in the admin and templates (scrapejobs/formats/en/formats.py).
FORMAT_MODULE_PATH = "scrapejobs.formats"
# json: one JSON object per line (production, a log pipeline); text: readable lines (make run
# sets it). Either way a line logged during a job's attempt carries its job id, tenant, domain
# and attempt, and credentials are masked (apps/runtime/logs.py).
LOG_FORMATS = ("json", "text")
SCRAPEJOBS_LOG_FORMAT = env.str("SCRAPEJOBS_LOG_FORMAT", default="json").strip().lower()
if SCRAPEJOBS_LOG_FORMAT not in LOG_FORMATS:
    raise environ.ImproperlyConfigured(f"SCRAPEJOBS_LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "job": {"()": "apps.runtime.logs.JobContextFilter"},
        "secrets": {"()": "apps.runtime.logs.SecretsFilter"},
        "beat_ticks": {"()": "apps.runtime.logs.BeatTickFilter"},
        "uvicorn_access": {"()": "apps.runtime.logs.UvicornAccessFilter"},
    },
    "formatters": {
        "json": {"()": "apps.runtime.logs.JsonFormatter"},
        "text": {"()": "apps.runtime.logs.TextFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": SCRAPEJOBS_LOG_FORMAT,
            "filters": ["job", "secrets"],
        }
    },
    "loggers": {
        "celery.beat": {"filters": ["beat_ticks"]},
        # dictConfig drops the handlers uvicorn's gunicorn worker gave this logger (and it does not
        # propagate): without its own handler every access line would vanish under the web's ASGI worker.
        "uvicorn.access": {
            "filters": ["uvicorn_access"],
            "handlers": ["console"],
            "level": "INFO",
            "propagate": False,
        },
    },
    "root": {"handlers": ["console"], "level": env.str("SCRAPEJOBS_LOG_LEVEL", default="INFO")},
}

# --- Tracing (FR-29, docs/tracing.md) ----------------------------------------------------
# One trace per job with OpenTelemetry, off unless an exporter is configured: then apps/tracing.py
# imports nothing and a job costs what it did. OTEL_TRACES_EXPORTER: otlp (the default once
# OTEL_EXPORTER_OTLP_ENDPOINT is set), console, file (SCRAPEJOBS_TRACE_FILE) or none (off).
TRACES_EXPORTERS = ("otlp", "console", "file", "none")
_otlp_endpoint = env.str("OTEL_EXPORTER_OTLP_ENDPOINT", default="").strip()
SCRAPEJOBS_TRACES_EXPORTER = env.str("OTEL_TRACES_EXPORTER", default="").strip().lower() or (
    "otlp" if _otlp_endpoint else "none"
)
if SCRAPEJOBS_TRACES_EXPORTER not in TRACES_EXPORTERS:
    raise environ.ImproperlyConfigured(f"OTEL_TRACES_EXPORTER must be one of {', '.join(TRACES_EXPORTERS)}")
SCRAPEJOBS_TRACE_FILE = env.str("SCRAPEJOBS_TRACE_FILE", default=str(SCRAPEJOBS_RUN_DIR / "spans.jsonl"))
SCRAPEJOBS_TRACING = SCRAPEJOBS_TRACES_EXPORTER != "none"

# --- Waiting and the read cache --------------------------------
# ?wait=: each web process re-checks the jobs its callers wait for this often, in one query, so a
# lost NOTIFY (or one sent while its listener was reconnecting) delays an answer by at most this.
SCRAPEJOBS_WAIT_RECHECK_S = _positive_float("SCRAPEJOBS_WAIT_RECHECK_S", 1.0)
# GET /jobs/{id} reads a job through Redis: a job not final yet is kept this many seconds (so a
# change shows within it even if its notice is lost); 0 switches the cache off.
SCRAPEJOBS_READ_CACHE_TTL_S = _bounded_int("SCRAPEJOBS_READ_CACHE_TTL_S", 2, 0, 60)
# A final job's row changes no more (a requeue drops it from the cache): kept this long.
SCRAPEJOBS_READ_CACHE_FINAL_TTL_S = _bounded_int("SCRAPEJOBS_READ_CACHE_FINAL_TTL_S", 86400, 1, 30 * 86400)
