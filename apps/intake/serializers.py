"""Input validation for POST /jobs (FR-1 to FR-7, "Field bounds").

Strict on purpose: a JSON string is never taken for a number or the reverse, unknown fields are
refused, and every refusal names its field. The worker checks addresses again at connect time;
intake only refuses what it can see without DNS (literal private addresses, ``localhost``).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from rest_framework import serializers

from apps.jobs.models import JOB_TIMEOUT_DEFAULT_S, Method, Priority, Render
from apps.outbound.addresses import is_allowed_address

MAX_URL_LENGTH = 8192
MAX_HOSTNAME = 253  # DNS limit; jobs.domain holds it
MAX_HEADERS = 50
MAX_HEADER_NAME = 256
MAX_HEADER_VALUE = 8192
MAX_IDEMPOTENCY_KEY = 255

# (lowest, highest, default) of each integer field: JobCreateInput's fields, the lean path and the
# batches' column checks all read them here.
INT_BOUNDS = {
    "max_attempts": (1, 20, 5),
    "timeout_s": (1, 300, JOB_TIMEOUT_DEFAULT_S),
    "max_age_s": (0, 2_592_000, 0),
}

# Browser options (FR-30, docs/design/browser.md): what a rendered job may ask of the page.
WAIT_UNTIL = ("load", "domcontentloaded", "networkidle")
BLOCKABLE = ("images", "media", "fonts")
MAX_SELECTOR_BYTES = 1024
# (lowest, highest, default) of the viewport's sides in CSS pixels: a phone's to a 4K screen's.
VIEWPORT_BOUNDS = {"width": (320, 3840, 1280), "height": (240, 2160, 800)}

# RFC 9110 token characters: what a header name may be made of.
_HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# Headers the fetcher owns: framing and connection management (a caller-set Content-Length or
# Transfer-Encoding could desynchronise the request; Host must match the URL we checked).
FORBIDDEN_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-authorization",
        "proxy-authenticate",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
    }
)


LOCALHOST = "localhost"

# A URL that http_url_check accepts under any settings, as a pattern that whole columns are checked
# with (RE2 syntax; apps/batches/columns.py): http or https, a host of ASCII labels of 1 to 63
# characters whose last label starts with a letter (so never an IP literal), an optional port of
# at most 4 digits, then printable ASCII only (no whitespace, no control character). The group
# ``host`` is urlsplit's hostname before lowercasing. It is narrower than http_url_check on
# purpose: a URL it does not match is decided by http_url_check, never refused for not matching.
# Its host must still be checked against MAX_HOSTNAME and LOCALHOST, and the whole against
# MAX_URL_LENGTH.
PLAIN_HTTP_URL = (
    r"^[hH][tT][tT][pP][sS]?://(?P<host>(?:[A-Za-z0-9-]{1,63}\.)*[A-Za-z][A-Za-z0-9-]{0,62})"
    r"(?::[0-9]{1,4})?(?:[/?#][!-~]*)?$"
)
# The same ``host`` group, found with a pattern that is cheap to extract with (RE2 matches the
# pattern above fast but extracts its group twenty times slower); only for URLs that match it.
PLAIN_HTTP_URL_HOST = r"^[^:]*://(?P<host>[^:/?#]*)"


def host_is_refused(host: str) -> bool:
    """A host we can tell is not public without resolving it: a literal loopback, private,
    link-local (metadata 169.254.169.254 included), reserved or unspecified address, or
    ``localhost``. Names are checked by the worker on the address it actually connects to."""
    if host == LOCALHOST or host.endswith(f".{LOCALHOST}"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return not is_allowed_address(ip)


def hostname_of(url: str) -> str:
    """The job's domain: the lowercase hostname, IDNA-encoded (``bücher.de`` → ``xn--bcher-kva.de``)."""
    host = urlsplit(url).hostname or ""
    return host.encode("idna").decode("ascii").lower()


class StrictCharField(serializers.CharField):
    """A JSON string, and only a string (DRF's CharField would take 5 or 5.0)."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer, and only an integer (DRF's IntegerField would take "5", 5.0 and true)."""

    default_error_messages = {"invalid": "A whole number is required."}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """A JSON boolean, and only a boolean (DRF's BooleanField would take "yes", 1 and "on")."""

    default_error_messages = {"invalid": "Must be true or false."}

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


# A JSON object whose unknown fields are refused, each by name. (Comments, not docstrings, on
# the input serializers: a docstring becomes the schema's description of the object.)
class StrictObjectInput(serializers.Serializer):
    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, Mapping):
            raise serializers.ValidationError(
                {"non_field_errors": [f"Expected a JSON object, got {type(data).__name__}."]}
            )
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class ViewportInput(StrictObjectInput):
    width = StrictIntegerField(
        min_value=VIEWPORT_BOUNDS["width"][0],
        max_value=VIEWPORT_BOUNDS["width"][1],
        default=VIEWPORT_BOUNDS["width"][2],
    )
    height = StrictIntegerField(
        min_value=VIEWPORT_BOUNDS["height"][0],
        max_value=VIEWPORT_BOUNDS["height"][1],
        default=VIEWPORT_BOUNDS["height"][2],
    )


# When a job's webhook is sent (FR-34): when it ends, or only when its body changed.
CALLBACK_ON = ("final", "change")


# The ``browser`` object of a rendered job (FR-30); every option bounded.
class BrowserOptionsInput(StrictObjectInput):
    wait_until = serializers.ChoiceField(
        choices=WAIT_UNTIL, default="load", help_text="The page event the render waits for."
    )
    wait_for_selector = StrictCharField(
        required=False,
        allow_null=True,
        trim_whitespace=False,
        help_text=f"A CSS selector the render then waits for (at most {MAX_SELECTOR_BYTES} bytes); "
        "the attempt times out if it never appears within timeout_s.",
    )
    screenshot = StrictBooleanField(
        default=False, help_text="Also store a full-page PNG, linked from /result as `screenshot`."
    )
    viewport = ViewportInput(required=False, help_text="The page's size in CSS pixels.")
    block = serializers.ListField(
        child=serializers.ChoiceField(choices=BLOCKABLE),
        default=list,
        max_length=len(BLOCKABLE),
        help_text="Resource types the page does not load.",
    )

    def validate_wait_for_selector(self, value: str | None) -> str | None:
        if value is not None and not 1 <= len(value.encode()) <= MAX_SELECTOR_BYTES:
            raise serializers.ValidationError(f"Must be 1 to {MAX_SELECTOR_BYTES} bytes.")
        return value


def browser_options_complete(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The browser options with every default filled in, in one canonical form (the stored
    ``Job.browser_options``, and part of the single-flight fetch key)."""
    options = options or {}
    viewport = options.get("viewport") or {}
    return {
        "wait_until": options.get("wait_until", "load"),
        "wait_for_selector": options.get("wait_for_selector"),
        "screenshot": bool(options.get("screenshot", False)),
        "viewport": {side: viewport.get(side, bounds[2]) for side, bounds in VIEWPORT_BOUNDS.items()},
        "block": sorted(set(options.get("block") or ())),
    }


def http_url_check(value: str, *, what: str) -> str:
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise serializers.ValidationError(f"{what} must not contain whitespace or control characters.")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a port outside 0..65535 or not a number
    except ValueError as exc:
        raise serializers.ValidationError(f"{what} is not a valid URL ({exc}).") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise serializers.ValidationError(f"{what} must be an http or https URL.")
    if not parts.hostname:
        raise serializers.ValidationError(f"{what} must have a host.")
    try:
        domain = hostname_of(value)
    except UnicodeError:
        raise serializers.ValidationError(f"{what} has a host name that is not valid IDNA.") from None
    if len(domain) > MAX_HOSTNAME:
        raise serializers.ValidationError(f"{what} has a host name longer than {MAX_HOSTNAME} characters.")
    if not settings.SCRAPEJOBS_ALLOW_PRIVATE_TARGETS and host_is_refused(parts.hostname):
        raise serializers.ValidationError(
            f"{what} points at a private, loopback, link-local or reserved address; refused."
        )
    return value


def headers_check(value: dict[str, str]) -> dict[str, str]:
    if len(value) > MAX_HEADERS:
        raise serializers.ValidationError(f"At most {MAX_HEADERS} headers.")
    for name, header_value in value.items():
        if len(name) > MAX_HEADER_NAME or not _HEADER_NAME.match(name):
            raise serializers.ValidationError(f"{name!r} is not a valid header name.")
        if name.lower() in FORBIDDEN_HEADERS:
            raise serializers.ValidationError(f"{name} is set by the fetcher and cannot be given.")
        if any(c in header_value for c in "\r\n\0"):
            raise serializers.ValidationError(f"The value of {name} contains a line break or NUL.")
    return value


class JobCreateInput(StrictObjectInput):
    url = StrictCharField(max_length=MAX_URL_LENGTH, trim_whitespace=False)
    method = serializers.ChoiceField(choices=Method.choices, default=Method.GET)
    headers = serializers.DictField(
        child=StrictCharField(max_length=MAX_HEADER_VALUE, allow_blank=True, trim_whitespace=False),
        default=dict,
        help_text=f"Request headers, name → string value; at most {MAX_HEADERS}. Host, Content-Length, "
        "Transfer-Encoding and connection-management headers are refused (the fetcher sets them).",
    )
    body = StrictCharField(
        required=False, allow_null=True, allow_blank=True, trim_whitespace=False, help_text="POST only."
    )
    priority = serializers.ChoiceField(choices=Priority.choices, default=Priority.NORMAL)
    callback_url = StrictCharField(
        required=False, allow_null=True, max_length=MAX_URL_LENGTH, trim_whitespace=False
    )
    max_attempts = StrictIntegerField(
        min_value=INT_BOUNDS["max_attempts"][0],
        max_value=INT_BOUNDS["max_attempts"][1],
        default=INT_BOUNDS["max_attempts"][2],
    )
    timeout_s = StrictIntegerField(
        min_value=INT_BOUNDS["timeout_s"][0],
        max_value=INT_BOUNDS["timeout_s"][1],
        default=INT_BOUNDS["timeout_s"][2],
    )
    max_age_s = StrictIntegerField(
        min_value=INT_BOUNDS["max_age_s"][0],
        max_value=INT_BOUNDS["max_age_s"][1],
        default=INT_BOUNDS["max_age_s"][2],
        help_text="Reuse an identical fetch finished at most this many seconds ago; 0: never.",
    )
    render = serializers.ChoiceField(
        choices=Render.choices,
        default=Render.NONE,
        help_text='"browser": load the page in headless Chromium and store its HTML after its scripts '
        "ran (GET only; timeout_s bounds the whole render). Default: the plain HTTP fetch.",
    )
    browser = BrowserOptionsInput(required=False, help_text='Options of render "browser"; refused otherwise.')
    revalidate = StrictBooleanField(
        default=False,
        help_text="Ask the target with the validators (ETag, Last-Modified) of your previous success of the "
        "same request: a 304 Not Modified keeps that body (same sha256, nothing stored again). Plain fetch "
        "only (docs/revalidation.md).",
    )
    callback_on = serializers.ChoiceField(
        choices=CALLBACK_ON,
        default="final",
        help_text='"final": the webhook is sent when the job ends; "change": only when it failed or its '
        "body changed since your previous success of the same request (a first fetch counts as a change). "
        "Needs callback_url.",
    )

    def validate_url(self, value: str) -> str:
        return http_url_check(value, what="url")

    def validate_callback_url(self, value: str | None) -> str | None:
        return None if value is None else http_url_check(value, what="callback_url")

    def validate_headers(self, value: dict[str, str]) -> dict[str, str]:
        return headers_check(value)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("body") is not None and attrs["method"] != Method.POST:
            raise serializers.ValidationError({"body": ["A body is only allowed with method POST."]})
        # A plain job's validated data has neither field: its idempotency fingerprint and the lean
        # path's answer stay what they were before rendering existed.
        render = attrs.pop("render", Render.NONE)
        browser = attrs.pop("browser", None)
        if render == Render.BROWSER:
            if attrs["method"] != Method.GET:
                raise serializers.ValidationError(
                    {"render": ['render "browser" is only allowed with method GET.']}
                )
            attrs["render"] = Render.BROWSER
            attrs["browser_options"] = browser_options_complete(browser)
        elif browser is not None:
            raise serializers.ValidationError({"browser": ['Only allowed with render "browser".']})
        attrs.setdefault("body", None)
        attrs.setdefault("callback_url", None)
        # Re-fetching (FR-33, FR-34): set only when asked, so a plain job's validated data (its
        # idempotency fingerprint, the lean path's answer) stays what it was.
        if attrs.pop("revalidate", False):
            if render == Render.BROWSER:
                raise serializers.ValidationError(
                    {"revalidate": ['revalidate is only allowed with the plain fetch (render "none").']}
                )
            attrs["revalidate"] = True
        if attrs.pop("callback_on", "final") == "change":
            if attrs["callback_url"] is None:
                raise serializers.ValidationError({"callback_on": ['"change" needs a callback_url.']})
            attrs["callback_on"] = "change"
        return attrs


def callback_url_validate(raw: str | None) -> str | None:
    """A ``callback_url`` given beside a request's body rather than in it (POST /batches' query
    parameter, FR-10): checked by JobCreateInput's own field and rule, so it is refused with the
    same messages, under the same field name, as a job's."""
    if raw is None:
        return None
    field = JobCreateInput().fields["callback_url"]
    try:
        return http_url_check(field.run_validation(raw), what="callback_url")
    except serializers.ValidationError as e:
        raise serializers.ValidationError({"callback_url": e.detail}) from None


# The choices as sets: the lean path (apps/intake/lean.py) and a batch's column pass
# (apps/batches/columns.py) check a value against them.
METHODS = frozenset(Method.values)
PRIORITIES = frozenset(Priority.values)


def request_fingerprint(validated: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of the validated request (defaults filled, keys sorted): the
    same request written with other key order or explicit defaults has the same fingerprint."""
    canonical = json.dumps(validated, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def idempotency_key_validate(raw: str | None) -> str | None:
    if raw is None:
        return None
    if not 1 <= len(raw) <= MAX_IDEMPOTENCY_KEY or not raw.isprintable():
        raise serializers.ValidationError(
            {"Idempotency-Key": [f"Must be 1 to {MAX_IDEMPOTENCY_KEY} printable characters."]}
        )
    return raw


class LinksOutput(serializers.Serializer):
    self = serializers.URLField()  # type: ignore[assignment]
    result = serializers.URLField()


class JobCreatedOutput(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.CharField(help_text='"queued" for a new job; a replay shows the current status.')
    links = LinksOutput()
