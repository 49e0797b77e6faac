"""Per-domain politeness limits an operator sets in the admin (contract section 4, NFR-5).

A domain without a row gets the ``SCRAPEJOBS_DOMAIN_DEFAULT_*`` settings. The limits themselves
are enforced in Redis, shared by every worker (``apps.politeness.services``); this table only
says what they are. Workers read it through a short cache (``apps.politeness.selectors``), so an
edit takes effect everywhere within a few seconds.
"""

from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models


class DomainPolicy(models.Model):
    # The job's domain exactly as intake stores it (``jobs_job.domain``: the lowercase,
    # IDNA-encoded host name). ``www.example.com`` and ``example.com`` are different domains.
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
    note = models.CharField(max_length=255, blank=True, default="", help_text="Why this policy exists.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "domain policy"
        verbose_name_plural = "domain policies"
        ordering = ["domain"]

    def __str__(self) -> str:
        return f"{self.domain}: {self.requests_per_second:g}/s, burst {self.burst}, {self.max_concurrency} at once"
