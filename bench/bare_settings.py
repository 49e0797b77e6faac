"""The service's settings with a one-view URLconf: the floor the intake benchmark compares to."""

from settings.base import *  # noqa: F403

ROOT_URLCONF = "bench.bare_app"
