"""Test settings: the base settings with test-friendly environment defaults.

Only defaults: anything set in the environment still wins, and the processes the end-to-end tests
start (worker, beat, writer) get the same values through their environment.
"""

import os

os.environ.setdefault("SCRAPEJOBS_ALLOW_PRIVATE_TARGETS", "true")  # targets are local servers
os.environ.setdefault("DJANGO_SECRET_KEY", "tests-only-secret-key-never-used-in-a-deployment")
os.environ.setdefault("SCRAPEJOBS_RATE_LIMIT_PER_SECOND", "0")  # the limit's own tests set it
os.environ.setdefault("SCRAPEJOBS_DB_POOL", "false")  # pytest-django recreates the database
os.environ.setdefault("SCRAPEJOBS_RETRY_BASE_S", "0.2")
os.environ.setdefault("SCRAPEJOBS_RETRY_CAP_S", "2")
os.environ.setdefault("SCRAPEJOBS_LOG_LEVEL", "WARNING")
os.environ.setdefault("SCRAPEJOBS_LOG_FORMAT", "text")  # failing tests show readable worker logs
# Local targets take thousands of jobs per test: domain limits off unless a test sets a policy
# (tests/politeness); retried 503s must not slow the shared 127.0.0.1 "domain" down, and every
# other test's local target has no robots.txt to read (tests/politeness turn both on).
os.environ.setdefault("SCRAPEJOBS_DOMAIN_DEFAULT_RPS", "1000000")
os.environ.setdefault("SCRAPEJOBS_DOMAIN_DEFAULT_BURST", "1000000")
os.environ.setdefault("SCRAPEJOBS_DOMAIN_DEFAULT_CONCURRENCY", "1000000")
os.environ.setdefault("SCRAPEJOBS_DOMAIN_ADAPTIVE", "false")
os.environ.setdefault("SCRAPEJOBS_ROBOTS_OBEY", "false")
# The tests run as root, where Chromium cannot sandbox itself (docs/design/browser.md).
os.environ.setdefault("SCRAPEJOBS_BROWSER_SANDBOX", "false")

# `make test-fast` runs the tests in parallel processes (pytest-xdist, PYTEST_XDIST_WORKER
# gw0, gw1, ...): pytest-django gives each its own test database; here each gets its own pair of
# Redis databases (REDIS_URL's and the broker's, the next one) and its own results directory, so
# that one process's flush or clean-up never touches another's keys and files.
# Once per process tree: the service processes a test starts inherit both PYTEST_XDIST_WORKER and
# the databases chosen here, and must not move them again (they would talk to other databases).
_xdist_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _xdist_worker.startswith("gw") and os.environ.get("SCRAPEJOBS_TEST_XDIST_WORKER") != _xdist_worker:
    os.environ["SCRAPEJOBS_TEST_XDIST_WORKER"] = _xdist_worker
    from urllib.parse import urlsplit as _urlsplit
    from urllib.parse import urlunsplit as _urlunsplit

    _n = int(_xdist_worker[2:]) + 1
    _parts = _urlsplit(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    _db = int(_parts.path.strip("/") or 0)
    os.environ["REDIS_URL"] = _urlunsplit(_parts._replace(path=f"/{(_db + 2 * _n) % 16}"))
    os.environ.pop("CELERY_BROKER_URL", None)  # the next database of REDIS_URL's
    os.environ["SCRAPEJOBS_RESULTS_DIR"] = os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".run", f"results-{_xdist_worker}"
    )

from settings.base import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# tests/support/stalling_storage.py: a results storage that stalls, for the worker processes of
# the storage-stall tests only.
if os.environ.get("SCRAPEJOBS_TEST_RESULTS_BACKEND"):
    STORAGES["results"] = {"BACKEND": os.environ["SCRAPEJOBS_TEST_RESULTS_BACKEND"]}  # noqa: F405
