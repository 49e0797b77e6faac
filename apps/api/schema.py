"""OpenAPI extensions: how the bearer token appears in the schema (drf-spectacular finds
extensions by import; apps.api.apps imports this module at start-up)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "apps.tenants.authentication.BearerTokenAuthentication"
    name = "bearerToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token of your tenant: `Authorization: Bearer sj_…`.",
        }
