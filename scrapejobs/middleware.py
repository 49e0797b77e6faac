"""Django's browser middleware, skipped for the API.

Sessions, CSRF, the logged-in user and flash messages serve the admin and the dashboard. The API
(``/api/``) authenticates every call by bearer token, is CSRF-exempt (DRF) and uses none of them,
yet each of them ran on every API request: building a message store and a session store alone
was about 5% of a submit's CPU. These subclasses run Django's code unchanged for every other path
(and are what the admin's system checks look for: subclasses of Django's classes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.http import HttpRequest, HttpResponseForbidden
from django.middleware.csrf import CsrfViewMiddleware

API_PREFIX = "/api/"


def _is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith(API_PREFIX)


class _SkippedForApi:
    """Runs the middleware it is mixed into for every path but the API's."""

    get_response: Callable[[HttpRequest], Any]

    def __call__(self, request: HttpRequest) -> Any:
        if _is_api(request):
            return self.get_response(request)
        return super().__call__(request)  # type: ignore[misc]


class BrowserSessionMiddleware(_SkippedForApi, SessionMiddleware):
    pass


class BrowserCsrfViewMiddleware(_SkippedForApi, CsrfViewMiddleware):
    def process_view(
        self, request: HttpRequest, callback: Callable[..., Any], callback_args: Any, callback_kwargs: Any
    ) -> HttpResponseForbidden | None:
        if _is_api(request):
            return None
        return super().process_view(request, callback, callback_args, callback_kwargs)


class BrowserAuthenticationMiddleware(_SkippedForApi, AuthenticationMiddleware):
    pass


class BrowserMessageMiddleware(_SkippedForApi, MessageMiddleware):
    pass
