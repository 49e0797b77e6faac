"""``GET /results/<token>``: the body behind a signed local link. No API token: the signature is
the permission (FR-5: result links work without the API token and expire)."""

from __future__ import annotations

from django.http import FileResponse, HttpRequest, JsonResponse
from django.http.response import HttpResponseBase
from django.views.decorators.http import require_safe

from apps.results.links import LinkExpired, LinkInvalid, link_token_read
from apps.results.storage import results_storage


@require_safe
def result_download(request: HttpRequest, token: str) -> HttpResponseBase:
    try:
        grant = link_token_read(token)
    except LinkInvalid:
        return _error(404, "not_found", "No such result link.")
    except LinkExpired:
        return _error(403, "link_expired", "This result link has expired; ask the API for a new one.")
    storage = results_storage()
    try:
        fh = storage.open(grant.key, "rb")
    except FileNotFoundError:
        return _error(404, "not_found", "The result was removed.")
    response = FileResponse(fh, content_type=grant.content_type or "application/octet-stream")
    # The body is the target's, not ours: never let a browser run it in our origin.
    response["Content-Disposition"] = "attachment"
    response["X-Content-Type-Options"] = "nosniff"
    response["Content-Security-Policy"] = "sandbox"
    response["Cache-Control"] = "private, no-store"
    return response


def _error(status: int, code: str, detail: str) -> JsonResponse:
    return JsonResponse({"type": code, "code": code, "detail": detail}, status=status)
