"""Generate ``src/scrapejobs_client/_models.py`` from the service's OpenAPI document.

    python clients/python/tools/generate_models.py [--check] [path/to/openapi.json]

The models are the answers' schemas as frozen dataclasses, and ``JOB_FIELDS`` the constraints of
a submitted job (types, bounds, enums, lengths, patterns) that ``submit`` checks before sending.
``--check`` exits 1 when the committed module is not what the document gives (the service's
tests run it: tests/clients/test_models_match_openapi.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "src" / "scrapejobs_client" / "_models.py"
DEFAULT_DOC = HERE.parents[2] / "tests" / "api" / "openapi.json"

# Schema name -> model name. Every answer a client method returns.
MODELS = {
    "LastErrorOutput": "LastError",
    "JobLinksOutput": "JobLinks",
    "LinksOutput": "CreatedLinks",
    "BatchLinksOutput": "BatchLinks",
    "ServedFromOutput": "ServedFrom",
    "RejectedRowOutput": "RejectedRow",
    "JobOutput": "Job",
    "JobCreatedOutput": "JobCreated",
    "AttemptOutput": "Attempt",
    "ResultOutput": "Result",
    "BatchOutput": "Batch",
    "JobCancelled": "JobCancelled",
    "JobCancelRequested": "JobCancelRequested",
    "BatchCancelOutput": "BatchCancelled",
    "ErrorOutput": "ErrorBody",
    "TokenOutput": "Token",
    "TokenCreatedOutput": "TokenCreated",
    "WebhookSecretOutput": "WebhookSecret",
    "WebhookSecretsOutput": "WebhookSecrets",
    "WebhookSecretRotatedOutput": "WebhookSecretRotated",
    "DeliveryOutput": "WebhookDelivery",
    "DisabledCallbackOutput": "DisabledCallback",
    "UsageAttemptsOutput": "UsageAttempts",
    "UsageTotalsOutput": "UsageTotals",
    "UsageDayOutput": "UsageDay",
    "UsageOutput": "Usage",
    "CrawlLinksOutput": "CrawlLinks",
    "CrawlPagesCountOutput": "CrawlPageCounts",
    "CrawlLinksCountOutput": "CrawlDiscovery",
    "CrawlOutput": "Crawl",
    "CrawlPageOutput": "CrawlPage",
}
ENUMS = {
    "JobOutputStatusEnum": "JOB_STATUSES",
    "PriorityEnum": "PRIORITIES",
    "MethodEnum": "METHODS",
    "BatchOutputStatusEnum": "BATCH_STATUSES",
    "TokenScopeEnum": "TOKEN_SCOPES",
    "CrawlStatusEnum": "CRAWL_STATUSES",
    "CrawlScopeEnum": "CRAWL_SCOPES",
}
KEYWORDS = {"class": "class_", "from": "from_"}
PY_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool"}


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[1]


def _field_type(prop: dict[str, Any], schemas: dict[str, Any]) -> tuple[str, str | None]:
    """(annotation, nested model or None) of one property."""
    refs = [x["$ref"] for x in prop.get("allOf", []) + prop.get("oneOf", []) if "$ref" in x]
    if "$ref" in prop:
        refs.append(prop["$ref"])
    for ref in refs:
        name = _ref_name(ref)
        if name in MODELS:
            return MODELS[name], MODELS[name]
        if "enum" in schemas[name] and name != "NullEnum":
            return "str", None
    t = prop.get("type")
    if t == "array":
        item = prop["items"]
        if "$ref" in item and _ref_name(item["$ref"]) in MODELS:
            return f"list[{MODELS[_ref_name(item['$ref'])]}]", MODELS[_ref_name(item["$ref"])]
        return "list[Any]", None
    if t == "object":
        return "dict[str, Any]", None
    return PY_TYPES.get(t or "", "Any"), None


def generate(doc: dict[str, Any]) -> str:
    schemas = doc["components"]["schemas"]
    out = [
        '"""Generated from the service\'s OpenAPI document by clients/python/tools/generate_models.py;',
        'do not edit (a test fails when this module and the document disagree)."""',
        "",
        "from __future__ import annotations",
        "",
        "from dataclasses import dataclass, field",
        "from typing import Any, ClassVar",
        "",
        "from scrapejobs_client._base import Model",
        "",
    ]
    for schema_name, const in ENUMS.items():
        out.append(f"{const} = {tuple(schemas[schema_name]['enum'])!r}")
    out.append("")
    for schema_name, model in MODELS.items():
        schema = schemas[schema_name]
        required = set(schema.get("required", []))
        props = schema["properties"]
        lines_required, lines_optional, nested, wire = [], [], {}, {}
        for wire_name, prop in props.items():
            py_name = KEYWORDS.get(wire_name, wire_name)
            annotation, inner = _field_type(prop, schemas)
            if inner:
                nested[py_name] = inner
            if py_name != wire_name:
                wire[py_name] = wire_name
            nullable = prop.get("nullable", False)
            if wire_name in required:
                lines_required.append(f"    {py_name}: {annotation}{' | None' if nullable else ''}")
            else:
                lines_optional.append(f"    {py_name}: {annotation} | None = None")
        out += ["", "@dataclass(frozen=True)", f"class {model}(Model):"]
        out += lines_required + lines_optional
        out.append("    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)")
        nested_src = ", ".join(f'"{k}": "{v}"' for k, v in nested.items())
        out.append(f"    _nested: ClassVar[dict[str, str]] = {{{nested_src}}}")
        wire_src = ", ".join(f'"{k}": "{v}"' for k, v in wire.items())
        out.append(f"    _wire: ClassVar[dict[str, str]] = {{{wire_src}}}")
        out.append("")
    # What a submitted job may hold, and its bounds: submit() checks these before sending.
    job_in = schemas["JobCreateInput"]
    fields: dict[str, dict[str, Any]] = {}
    for name, prop in job_in["properties"].items():
        rule: dict[str, Any] = {}
        refs = [x["$ref"] for x in prop.get("allOf", []) if "$ref" in x]
        referenced = schemas[_ref_name(refs[0])] if refs else None
        if referenced is not None and "enum" in referenced:
            rule["type"] = "string"
            rule["enum"] = list(referenced["enum"])
        elif referenced is not None:  # a nested object (render's browser options): the API checks it
            rule["type"] = referenced.get("type", "object")
        else:
            rule["type"] = prop.get("type")
        for key in ("minimum", "maximum", "minLength", "maxLength", "pattern", "maxProperties", "nullable"):
            if key in prop:
                rule[key] = prop[key]
        if "additionalProperties" in prop and isinstance(prop["additionalProperties"], dict):
            values = prop["additionalProperties"]
            rule["values"] = {k: values[k] for k in ("maxLength", "pattern") if k in values}
        if "x-propertyNames" in prop:
            rule["names"] = prop["x-propertyNames"]
        fields[name] = rule
    out.append("")
    out.append("# POST /jobs's fields and the constraints the API enforces on them.")
    out.append(f"JOB_FIELDS: dict[str, dict[str, Any]] = {json.dumps(fields, indent=4, sort_keys=True)}")
    out.append(f"JOB_REQUIRED: tuple[str, ...] = {tuple(job_in.get('required', []))!r}")
    crawl_in = schemas["CrawlCreateInput"]
    out.append("# POST /crawls's fields (crawl() refuses any other before sending).")
    out.append(f"CRAWL_FIELDS: tuple[str, ...] = {tuple(crawl_in['properties'])!r}")
    out.append("")
    text = "\n".join(out)
    return text.replace(": true", ": True").replace(": false", ": False").replace(": null", ": None")


def main(argv: list[str]) -> int:
    check = "--check" in argv
    paths = [a for a in argv if not a.startswith("--")]
    doc = json.loads(Path(paths[0] if paths else DEFAULT_DOC).read_text())
    text = generate(doc)
    if check:
        if OUT.read_text() != text:
            print(f"{OUT} does not match the OpenAPI document: run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
