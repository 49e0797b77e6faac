"""OpenAPI extensions: how the bearer token appears in the schema.

drf-spectacular finds extensions by import, so this module must be imported before any schema is
built, and only by processes that build one (a worker never does: NFR-42). REST_FRAMEWORK's
``DEFAULT_SCHEMA_CLASS`` (settings/base.py) names this module's ``AutoSchema``: DRF imports it
when a view's ``schema`` is first read, which ``@extend_schema`` does as each API view module is
imported and every schema generator does for every view, so the extension is registered first.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema


class AutoSchema(SpectacularAutoSchema):
    """drf-spectacular's AutoSchema, unchanged; named in settings so that importing it registers
    the extensions below (see the module's docstring)."""


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "apps.tenants.authentication.BearerTokenAuthentication"
    name = "bearerToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token of your tenant: `Authorization: Bearer sj_…`.",
        }
