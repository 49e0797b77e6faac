"""The constraints intake enforces, stated in the OpenAPI document (FR-24): a client or a
schema-driven fuzzer that builds requests from /api/v1/schema then builds requests the API accepts.

drf-spectacular describes the serializer's fields (types, bounds, enums, lengths); what it cannot
see, this post-processing hook adds, from the same constants the validation reads: the URL
pattern (http or https, a host name, printable ASCII; ``PLAIN_HTTP_URL`` is narrower than what is
accepted, so a URL it matches is never refused for its form), no unknown fields, the header
rules, a body only with POST, render "browser" only with GET and its options only with it,
revalidate only with the plain fetch, callback_on "change" only with a callback_url, the
browser options' own unknown fields and selector length, the job id's form, the Idempotency-Key's
length, and a batch's JSON body as a list of such jobs. Private and loopback hosts are refused unless the operator allows
them; names that resolve to them are refused at fetch time: a pattern cannot say that.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from apps.intake.serializers import (
    FORBIDDEN_HEADERS,
    MAX_HEADER_NAME,
    MAX_HEADERS,
    MAX_IDEMPOTENCY_KEY,
    MAX_SELECTOR_BYTES,
    MAX_URL_LENGTH,
    PLAIN_HTTP_URL,
)

# ECMA-262 (what JSON Schema patterns are) has no named groups; and `localhost` is refused.
URL_PATTERN = re.sub(r"\(\?P<\w+>", "(", PLAIN_HTTP_URL).replace(
    "://", "://(?!(?:[A-Za-z0-9-]+\\.)*[lL][oO][cC][aA][lL][hH][oO][sS][tT](?:[:/?#]|$))", 1
)
HEADER_NAME_PATTERN = r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$"
# StrictCharField: no NUL; header values: no line break either.
NO_NUL_PATTERN = r"^[^\u0000]*$"
HEADER_VALUE_PATTERN = r"^[^\r\n\u0000]*$"


# The rules across fields JobCreateInput.validate enforces (FR-30 for rendering); an absent
# property satisfies its `properties` clause, so an absent method counts as its default GET.
_ACROSS_FIELDS: list[dict[str, Any]] = [
    # A body only with method POST.
    {
        "anyOf": [
            {"not": {"required": ["body"]}},
            {"required": ["method", "body"], "properties": {"method": {"enum": ["POST"]}}},
        ]
    },
    # render "browser" only with method GET.
    {
        "anyOf": [
            {"properties": {"render": {"enum": ["none"]}}},
            {"properties": {"method": {"enum": ["GET"]}}},
        ]
    },
    # browser options only with render "browser".
    {
        "anyOf": [
            {"not": {"required": ["browser"]}},
            {"required": ["render"], "properties": {"render": {"enum": ["browser"]}}},
        ]
    },
    # revalidate only with the plain fetch (FR-33).
    {
        "anyOf": [
            {"properties": {"revalidate": {"enum": [False]}}},
            {"properties": {"render": {"enum": ["none"]}}},
        ]
    },
    # callback_on "change" only with a callback_url (FR-34).
    {
        "anyOf": [
            {"properties": {"callback_on": {"enum": ["final"]}}},
            {
                "required": ["callback_url"],
                "not": {"properties": {"callback_url": {"enum": [None]}}},
            },
        ]
    },
]


def constraints_hook(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular POSTPROCESSING_HOOKS entry (settings/base.py)."""
    schemas = result.get("components", {}).get("schemas", {})
    job = schemas.get("JobCreateInput")
    if job is not None:
        _job_constraints(job)
    for name in ("BrowserOptionsInput", "ViewportInput"):
        if name in schemas:  # StrictObjectInput: unknown fields are refused
            schemas[name]["additionalProperties"] = False
    if "BrowserOptionsInput" in schemas:
        # Bounded in UTF-8 bytes; this many characters never exceed it, whatever they are.
        schemas["BrowserOptionsInput"]["properties"]["wait_for_selector"].update(
            minLength=1, maxLength=MAX_SELECTOR_BYTES // 4, pattern=NO_NUL_PATTERN
        )
    for path, ops in result.get("paths", {}).items():
        for method, op in ops.items():
            for param in op.get("parameters", []):
                _parameter_constraints(param)
            if path.endswith("/batches") and method == "post":
                _batch_body_constraints(op)
    return result


def _job_constraints(job: dict[str, Any]) -> None:
    """JobCreateInput: its URLs' pattern, no unknown fields, the header rules, a body without NUL,
    and the rules across fields."""
    props = job["properties"]
    job["additionalProperties"] = False
    for name in ("url", "callback_url"):
        props[name].update(pattern=URL_PATTERN, minLength=1)
    props["url"]["description"] = "An http or https URL to fetch."
    props["callback_url"]["description"] = (
        "An http or https URL, POSTed the job's final state, signed (docs/webhooks.md)."
    )
    headers = props["headers"]
    headers["maxProperties"] = MAX_HEADERS
    headers["additionalProperties"]["pattern"] = HEADER_VALUE_PATTERN
    # OpenAPI 3.0 has no propertyNames: stated as an extension and in words.
    headers["x-propertyNames"] = {
        "pattern": HEADER_NAME_PATTERN,
        "maxLength": MAX_HEADER_NAME,
        "not": {"enum": sorted(FORBIDDEN_HEADERS)},
    }
    headers["description"] = (
        f"Request headers, name → string value; at most {MAX_HEADERS}. Names are RFC 9110 tokens "
        f"of at most {MAX_HEADER_NAME} characters; values have no line break or NUL. These are "
        f"set by the fetcher and refused (any case): {', '.join(sorted(FORBIDDEN_HEADERS))}."
    )
    props["body"]["pattern"] = NO_NUL_PATTERN
    job["allOf"] = copy.deepcopy(_ACROSS_FIELDS)


def _parameter_constraints(param: dict[str, Any]) -> None:
    """A job or batch id's form, the Idempotency-Key's length, POST /batches's callback_url."""
    if param.get("in") == "path" and param.get("name") in ("job_id", "batch_id"):
        param["schema"] = {"type": "string", "format": "uuid"}
    if param.get("in") == "header" and param.get("name") == "Idempotency-Key":
        param["schema"] = {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_IDEMPOTENCY_KEY,
            "pattern": r"^[\u0020-\u007e]+$",
        }
    if param.get("in") == "query" and param.get("name") == "callback_url":
        # Checked as a job's callback_url (POST /batches).
        param["schema"] = {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_URL_LENGTH,
            "pattern": URL_PATTERN,
        }


def _batch_body_constraints(op: dict[str, Any]) -> None:
    """POST /batches's JSON body: a list of jobs, each as POST /jobs takes it."""
    content = op.get("requestBody", {}).get("content", {})
    if "application/json" in content:
        content["application/json"]["schema"] = {
            "type": "array",
            "minItems": 1,
            "items": {"$ref": "#/components/schemas/JobCreateInput"},
            "description": "Job rows; a row that breaks POST /jobs's rules is rejected with "
            "its number and reasons, the others become jobs.",
        }
