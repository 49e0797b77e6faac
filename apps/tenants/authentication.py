from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions
from rest_framework.request import Request

from apps.tenants.services import token_authenticate


class TenantPrincipal:
    """What ``request.user`` is for API calls: the tenant behind the bearer token."""

    is_authenticated = True
    is_anonymous = False

    def __init__(self, tenant: Any, token: Any):
        self.tenant = tenant
        self.token = token
        self.pk = tenant.pk

    def __str__(self) -> str:
        return f"tenant:{self.tenant.name}"


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[TenantPrincipal, Any] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != "bearer" or not raw.strip():
            raise exceptions.AuthenticationFailed("Authorization header must be 'Bearer <token>'.")
        found = token_authenticate(raw=raw.strip())
        if found is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked token.")
        tenant, token = found
        return TenantPrincipal(tenant, token), token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'
