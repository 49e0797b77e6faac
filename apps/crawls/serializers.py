"""POST /crawls's input and how a crawl looks in answers (FR-39, docs/crawls.md)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.api.paths import API_V1_BASE
from apps.crawls.links import MAX_PATTERNS, pattern_problem
from apps.crawls.models import Crawl, CrawlPageKind, CrawlScope, CrawlSitemaps, CrawlStatus
from apps.intake.serializers import (
    MAX_URL_LENGTH,
    JobCreateInput,
    StrictCharField,
    StrictIntegerField,
    StrictObjectInput,
    http_url_check,
)

MAX_DEPTH = 100
DEFAULT_DEPTH = 10
MAX_SEEDS = 100
# What each page's job may be given (POST /jobs's fields, with its bounds). Not url, method, body
# (a page is a GET of a link) nor callback_url (the crawl has its own).
JOB_FIELDS = (
    "headers",
    "priority",
    "max_attempts",
    "timeout_s",
    "max_age_s",
    "render",
    "browser",
    "revalidate",
)


def _patterns(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise serializers.ValidationError("A list of path patterns.")
    if len(value) > MAX_PATTERNS:
        raise serializers.ValidationError(f"At most {MAX_PATTERNS} patterns.")
    problems = [f"{p!r}: {why}" for p in value if (why := pattern_problem(p))]
    if problems:
        raise serializers.ValidationError(problems)
    return list(value)


@extend_schema_field({"type": "array", "items": {"type": "string"}, "maxItems": MAX_PATTERNS})
class PatternsField(serializers.Field):
    def to_internal_value(self, data: Any) -> list[str]:
        return _patterns(data)

    def to_representation(self, value: Any) -> Any:
        return value


class CrawlCreateInput(StrictObjectInput):
    seeds = serializers.ListField(
        child=StrictCharField(max_length=MAX_URL_LENGTH, trim_whitespace=False),
        min_length=1,
        max_length=MAX_SEEDS,
        help_text=f"The start pages (depth 0): 1 to {MAX_SEEDS} http(s) URLs, judged by the address "
        "guard as a job's URL is.",
    )
    max_pages = StrictIntegerField(
        min_value=1,
        help_text="Exactly the most pages that become jobs, the start page included; at most "
        "SCRAPEJOBS_CRAWL_MAX_PAGES.",
    )
    max_depth = StrictIntegerField(
        min_value=0,
        max_value=MAX_DEPTH,
        default=DEFAULT_DEPTH,
        help_text="Links followed from a seed (a seed is depth 0).",
    )
    scope = serializers.ChoiceField(
        choices=CrawlScope.choices,
        default=CrawlScope.SAME_ORIGIN,
        help_text='"same_origin": a seed\'s scheme, host and port; "same_site": a seed host\'s registrable '
        'domain (the public suffix list); "prefix": a seed\'s origin, under its path up to the last "/".',
    )
    sitemaps = serializers.ChoiceField(
        choices=CrawlSitemaps.choices,
        default=CrawlSitemaps.INCLUDE,
        help_text='"include": the robots.txt Sitemap: lines of each seed\'s origin and its /sitemap.xml add '
        'their URLs at depth 1, and links are followed; "only": the sitemaps\' URLs, no link followed; '
        '"skip": no sitemap.',
    )
    include = PatternsField(
        required=False,
        default=list,
        help_text="Path patterns (* and a final $): keep only links matching one.",
    )
    exclude = PatternsField(required=False, default=list, help_text="Path patterns: drop links matching one.")
    job = serializers.DictField(
        required=False,
        default=dict,
        help_text=f"Each page's job options, as POST /jobs takes them: {', '.join(JOB_FIELDS)}.",
    )
    callback_url = StrictCharField(
        required=False,
        allow_null=True,
        max_length=MAX_URL_LENGTH,
        trim_whitespace=False,
        help_text="Called once when the crawl ends (crawl.completed) or is cancelled (crawl.cancelled).",
    )

    def validate_seeds(self, value: list[str]) -> list[str]:
        problems: dict[int, list[str]] = {}
        for i, seed in enumerate(value):
            try:
                http_url_check(seed, what="seed")
            except serializers.ValidationError as e:
                problems[i] = [str(d) for d in e.detail]  # type: ignore[union-attr]
        if problems:
            raise serializers.ValidationError(problems)  # type: ignore[arg-type]
        return list(value)

    def validate_callback_url(self, value: str | None) -> str | None:
        return None if value is None else http_url_check(value, what="callback_url")

    def validate_max_pages(self, value: int) -> int:
        cap = settings.SCRAPEJOBS_CRAWL_MAX_PAGES
        if value > cap:
            raise serializers.ValidationError(f"At most {cap} (SCRAPEJOBS_CRAWL_MAX_PAGES).")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        options = attrs.get("job") or {}
        unknown = sorted(set(options) - set(JOB_FIELDS))
        if unknown:
            raise serializers.ValidationError({f"job.{name}": ["Not a page job option."] for name in unknown})
        checked = JobCreateInput(data={**options, "url": attrs["seeds"][0]})
        if not checked.is_valid():
            raise serializers.ValidationError({f"job.{k}": v for k, v in checked.errors.items()})
        data = dict(checked.validated_data)
        for name in ("url", "method", "body", "callback_url"):
            data.pop(name, None)
        attrs["job"] = data
        attrs.setdefault("callback_url", None)
        return attrs


def crawl_links(*, base: str, crawl_id: object) -> dict[str, str]:
    return {
        "self": f"{base}{API_V1_BASE}/crawls/{crawl_id}",
        "pages": f"{base}{API_V1_BASE}/crawls/{crawl_id}/pages",
        "jobs": f"{base}{API_V1_BASE}/jobs?crawl={crawl_id}",
    }


def _iso(value: Any) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def crawl_representation(crawl: Crawl, *, base: str, counts: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": str(crawl.id),
        "status": crawl.status,
        "seeds": crawl.seeds,
        "scope": crawl.scope,
        "include": crawl.include,
        "exclude": crawl.exclude,
        "max_pages": crawl.max_pages,
        "max_depth": crawl.max_depth,
        "sitemaps": crawl.sitemaps,
        "job": crawl.job_options,
        "callback_url": crawl.callback_url,
        "created_at": _iso(crawl.created_at),
        "finished_at": _iso(crawl.finished_at),
        "links": crawl_links(base=base, crawl_id=crawl.id),
    }
    if counts is not None:
        body.update(counts)
    return body


class CrawlPagesCountOutput(serializers.Serializer):
    total = serializers.IntegerField(help_text="Pages that became jobs; never above max_pages.")
    queued = serializers.IntegerField()
    running = serializers.IntegerField()
    succeeded = serializers.IntegerField()
    failed = serializers.IntegerField()
    cancelled = serializers.IntegerField()
    erased = serializers.IntegerField(help_text="Pages whose job the tenant erased (FR-52).")


class CrawlLinksCountOutput(serializers.Serializer):
    discovered = serializers.IntegerField(help_text="Links read from the crawl's pages (each once per page).")
    duplicate = serializers.IntegerField(help_text="In scope, but a page of the crawl already.")
    out_of_scope = serializers.IntegerField(help_text="Outside the scope, or refused by include/exclude.")
    over_limit = serializers.IntegerField(help_text="New, but the crawl had max_pages pages already.")
    disallowed = serializers.IntegerField(
        help_text="Disallowed by the origin's robots.txt as cached: never made a job."
    )
    out_of_scope_redirect = serializers.IntegerField(
        help_text="Pages redirected out of the scope: fetched, their links not read."
    )
    sitemaps = serializers.IntegerField(
        help_text="Sitemap documents fetched as jobs of the crawl (not pages; not in max_pages)."
    )
    nofollow = serializers.IntegerField(
        help_text='Not followed: rel="nofollow", or the page\'s meta robots or X-Robots-Tag says nofollow.'
    )


class CrawlLinksOutput(serializers.Serializer):
    self = serializers.URLField()  # type: ignore[assignment]
    pages = serializers.URLField()
    jobs = serializers.URLField()


class CrawlOutput(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=CrawlStatus.choices)
    seeds = serializers.ListField(child=serializers.CharField())
    scope = serializers.ChoiceField(choices=CrawlScope.choices)
    include = serializers.ListField(child=serializers.CharField())
    exclude = serializers.ListField(child=serializers.CharField())
    max_pages = serializers.IntegerField()
    max_depth = serializers.IntegerField()
    sitemaps = serializers.ChoiceField(choices=CrawlSitemaps.choices)
    job = serializers.DictField()
    callback_url = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    links = CrawlLinksOutput()
    pages = CrawlPagesCountOutput(required=False)
    discovery = CrawlLinksCountOutput(required=False)


class CrawlPageOutput(serializers.Serializer):
    seq = serializers.IntegerField()
    url = serializers.CharField()
    depth = serializers.IntegerField(help_text="A page's links from a seed; a sitemap's level.")
    kind = serializers.ChoiceField(choices=CrawlPageKind.choices)
    found_on = serializers.IntegerField(allow_null=True, help_text="The seq of the page that linked here.")
    job = serializers.UUIDField()
    status = serializers.CharField()


class CrawlPagesOutput(serializers.Serializer):
    items = CrawlPageOutput(many=True)
    next_cursor = serializers.IntegerField(allow_null=True)


class CrawlListOutput(serializers.Serializer):
    items = CrawlOutput(many=True)
    next_cursor = serializers.CharField(allow_null=True)
