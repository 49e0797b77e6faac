"""Start-up refusals: settings that do for a laptop and are dangerous in a deployment.

The web (scrapejobs/asgi.py, and scrapejobs/wsgi.py for a WSGI server), every Celery process (worker, control, beat: scrapejobs/celery.py)
and manage.py (a Django system check) refuse to start while one holds, with the reason.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured


def insecure_settings() -> list[str]:
    """What would make a deployment unsafe, in words an operator can act on; empty when none."""
    problems = []
    if settings.SECRET_KEY == settings.INSECURE_SECRET_KEY and not settings.DEBUG:
        problems.append(
            "DJANGO_SECRET_KEY is not set: result links and sessions would be signed with a public "
            "placeholder, and anyone could forge them. Set it to a long random value "
            "(for example `openssl rand -hex 32`); `make run` makes one for development."
        )
    return problems


@checks.register(checks.Tags.security)
def secret_key_check(app_configs: Any, **kwargs: Any) -> list[checks.CheckMessage]:
    return [checks.Error(p, id="scrapejobs.E001") for p in insecure_settings()]


def refuse_insecure_start() -> None:
    problems = insecure_settings()
    if problems:
        raise ImproperlyConfigured(" ".join(problems))
