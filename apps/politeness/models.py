"""Per-domain politeness limits an operator sets in the admin (NFR-5).

A domain without a row gets the ``SCRAPEJOBS_DOMAIN_DEFAULT_*`` settings. The rate set here is a
ceiling: the rate actually granted adapts below it when the domain throttles (429/503, timeouts),
down to ``min_requests_per_second``, and a robots.txt ``Crawl-delay`` lowers it too. The limits themselves
are enforced in Redis, shared by every worker (``apps.politeness.limiter``); this table only
says what they are. Workers read it through a short cache (``apps.politeness.selectors``), so an
edit takes effect everywhere within a few seconds.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from apps.outbound.proxies import proxy_url_error

EGRESS_DIRECT = "none"


def egress_proxy_validate(value: str) -> None:
    if value.strip() in ("", EGRESS_DIRECT):
        return
    error = proxy_url_error(value.strip())
    if error is not None:
        raise ValidationError(f"Not a usable proxy URL: {error}.")


class DomainGrouping(models.TextChoices):
    HOST = "host", "exact host"
    REGISTRABLE = "registrable", "registrable domain"


class DomainPolicy(models.Model):
    # The job's domain exactly as intake stores it (``jobs_job.domain``: the lowercase,
    # IDNA-encoded host name), or, with ``grouping`` "registrable", a registrable domain
    # (``shop.com``) whose policy every host under it shares (``apps.politeness.selectors``).
    domain = models.CharField(max_length=255, unique=True)
    requests_per_second = models.FloatField(
        validators=[MinValueValidator(0.001)],
        help_text="Sustained request rate to this domain, summed over every worker.",
    )
    burst = models.PositiveIntegerField(
        validators=[MinValueValidator(1)],
        help_text="Requests allowed back to back after a quiet spell (token bucket size).",
    )
    max_concurrency = models.PositiveIntegerField(
        validators=[MinValueValidator(1)],
        help_text="Requests in flight to this domain at once, over every worker.",
    )
    min_requests_per_second = models.FloatField(
        null=True,
        blank=True,
        validators=[MinValueValidator(0.001)],
        help_text=(
            "Floor of the adaptive rate: however often the domain answers 429/503 or times out, "
            "it is still sent this many requests per second. Empty: SCRAPEJOBS_DOMAIN_ADAPTIVE_FLOOR_RPS."
        ),
    )
    grouping = models.CharField(
        max_length=16,
        choices=DomainGrouping.choices,
        default=DomainGrouping.HOST,
        help_text=(
            "Which host names share these limits: this exact host, or every host of its registrable "
            "domain (www.shop.com, img.shop.com and shop.com share one budget)."
        ),
    )
    obey_robots = models.BooleanField(
        default=True,
        help_text="Read and obey the host's robots.txt (when the service and the tenant obey it too).",
    )
    # FR-28, docs/egress.md: empty follows SCRAPEJOBS_EGRESS_PROXY; "none" goes direct.
    egress_proxy = models.CharField(
        max_length=2048,
        blank=True,
        default="",
        validators=[egress_proxy_validate],
        help_text=(
            "Egress proxy for this domain's fetches and robots.txt: http(s)://[user:password@]host:port, "
            "'none' for a direct connection, empty for the service's SCRAPEJOBS_EGRESS_PROXY."
        ),
    )
    note = models.CharField(max_length=255, blank=True, default="", help_text="Why this policy exists.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "domain policy"
        verbose_name_plural = "domain policies"
        ordering = ["domain"]

    def __str__(self) -> str:
        return f"{self.domain}: {self.requests_per_second:g}/s, burst {self.burst}, {self.max_concurrency} at once"
