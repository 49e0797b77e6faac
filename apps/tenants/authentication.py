from __future__ import annotations

from typing import Any

from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request

from apps.tenants.models import TokenScope
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


class TokenScopeInsufficient(exceptions.PermissionDenied):
    """403 ``permission_error`` ``token_scope_insufficient`` (apps/api/errors.py). Not an
    ``ApiError``: DRF's settings import this module, and apps.api.errors imports DRF's views."""

    default_code = "token_scope_insufficient"


def scope_refused(*, scope: str, needed: str) -> TokenScopeInsufficient:
    return TokenScopeInsufficient(
        f"This token's scope is {scope!r}; this call needs {needed!r} (docs/tokens.md)."
    )


class TokenScopePermission(permissions.IsAuthenticated):
    """REST_FRAMEWORK's default permission: authenticated, and within the token's scope (FR-36):
    ``read`` tokens may only read (GET, HEAD, OPTIONS); a view with ``required_scope = "admin"``
    (tokens, webhook secrets) takes only ``admin`` tokens; everything else takes ``full`` and
    ``admin``. Tokens made before scopes existed are ``admin``: they keep doing what they did."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if not super().has_permission(request, view):
            return False
        token = getattr(request.user, "token", None)
        scope = getattr(token, "scope", TokenScope.ADMIN)
        if scope == TokenScope.ADMIN:
            return True
        if getattr(view, "required_scope", None) == TokenScope.ADMIN:
            raise scope_refused(scope=scope, needed=TokenScope.ADMIN)
        if scope == TokenScope.READ and request.method not in permissions.SAFE_METHODS:
            raise scope_refused(scope=scope, needed=TokenScope.FULL)
        return True
