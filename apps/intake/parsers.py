from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class BoundedJSONParser(JSONParser):
    """JSON only, and a 400 (not a 500) for JSON nested deeper than the decoder's recursion limit.

    The size bound is not here: DRF reads ``request.body`` before it calls a JSON parser, so a
    check in ``parse`` came after Django had read the body (or raised RequestDataTooBig, a 500).
    scrapejobs/asgi.py (and under WSGI scrapejobs/middleware.py) refuses a body over
    SCRAPEJOBS_MAX_REQUEST_BYTES with a 413 before any view runs."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply.") from None
