"""Test settings: the base settings with test-friendly environment defaults.

Only defaults: anything set in the environment still wins, and the processes the end-to-end tests
start (worker, beat, writer) get the same values through their environment.
"""

import os

os.environ.setdefault("SCRAPEJOBS_ALLOW_PRIVATE_TARGETS", "true")  # targets are local servers
os.environ.setdefault("SCRAPEJOBS_RATE_LIMIT_PER_SECOND", "0")  # the limit's own tests set it
os.environ.setdefault("SCRAPEJOBS_DB_POOL", "false")  # pytest-django recreates the database
os.environ.setdefault("SCRAPEJOBS_RETRY_BASE_S", "0.2")
os.environ.setdefault("SCRAPEJOBS_RETRY_CAP_S", "2")
os.environ.setdefault("SCRAPEJOBS_LOG_LEVEL", "WARNING")

from settings.base import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
