"""The API's own pages that need no token: the OpenAPI schema, built once per process.

Building the schema walks every view and serializer (tens of ms of CPU): unauthenticated and
rebuilt on each request, it was a way to keep a web process busy for anyone. The schema cannot
change while the process runs, so it is built at the first request and served from memory; the
pages are rate-limited per client address (``AddressRateThrottle``, docs/settings.md).
"""

from __future__ import annotations

import threading
from typing import Any

from drf_spectacular.views import SpectacularAPIView
from rest_framework.request import Request
from rest_framework.response import Response

_built: dict[Any, Any] = {}
_lock = threading.Lock()


class CachedSchemaView(SpectacularAPIView):
    def _get_schema_response(self, request: Request) -> Response:
        version = self.api_version or request.version or self._get_version_parameter(request)
        key = (version, request.GET.get("lang"))
        if key not in _built:
            with _lock:  # one build, however many requests come in meanwhile
                if key not in _built:
                    _built[key] = super()._get_schema_response(request).data
        return Response(
            data=_built[key],
            headers={"Content-Disposition": f'inline; filename="{self._get_filename(request, version)}"'},
        )
