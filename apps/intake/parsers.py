from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from apps.api.errors import ApiError


class BoundedJSONParser(JSONParser):
    """JSON only, refused with 413 above SCRAPEJOBS_MAX_REQUEST_BYTES before anything is read,
    and a 400 (not a 500) for JSON nested deeper than the decoder's recursion limit."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        request = (parser_context or {}).get("request")
        if request is not None:
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            if length > settings.SCRAPEJOBS_MAX_REQUEST_BYTES:
                raise ApiError(
                    status_code=413,
                    type="invalid_request",
                    code="payload_too_large",
                    detail=f"The request body is over {settings.SCRAPEJOBS_MAX_REQUEST_BYTES} bytes.",
                )
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply.") from None
