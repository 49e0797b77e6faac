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

from settings.base import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# tests/support/stalling_storage.py: a results storage that stalls, for the worker processes of
# the storage-stall tests only.
if os.environ.get("SCRAPEJOBS_TEST_RESULTS_BACKEND"):
    STORAGES["results"] = {"BACKEND": os.environ["SCRAPEJOBS_TEST_RESULTS_BACKEND"]}  # noqa: F405
