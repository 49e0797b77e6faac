"""Domain policies in the Django admin (NFR-5, FR-9, FR-14, FR-9).

An operator adds or edits a domain's rate, burst and concurrency cap here; workers pick the change
up within ``apps.politeness.selectors.POLICY_CACHE_S``. The list and the page also show what Redis
holds for the domain right now, read-only: the adaptive rate in force, and on the page
the requests in flight, tokens, pause and robots.txt Crawl-delay.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin

from apps.outbound.proxies import proxy_url_masked
from apps.politeness.domains import registrable_domain
from apps.politeness.models import DomainGrouping, DomainPolicy
from apps.politeness.selectors import DomainState, domain_state_get


class DomainPolicyForm(forms.ModelForm):
    class Meta:
        model = DomainPolicy
        fields = (
            "domain",
            "grouping",
            "requests_per_second",
            "min_requests_per_second",
            "burst",
            "max_concurrency",
            "obey_robots",
            "egress_proxy",
            "note",
        )

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        # A proxy's password is never shown (FR-28): the field holds the masked URL, and a form
        # sent back with it unchanged keeps the stored one.
        self._stored_proxy = self.instance.egress_proxy if self.instance.pk else ""
        if self._stored_proxy:
            self.initial["egress_proxy"] = proxy_url_masked(self._stored_proxy)

    def clean_egress_proxy(self) -> str:
        value = self.cleaned_data.get("egress_proxy", "").strip()
        if self._stored_proxy and value == proxy_url_masked(self._stored_proxy):
            return self._stored_proxy
        return value

    def clean_domain(self) -> str:
        # Jobs store their domain as the lowercase host name; a policy written "Example.COM" or
        # with a trailing dot would otherwise silently match nothing.
        domain = self.cleaned_data["domain"].strip().lower().rstrip(".")
        if not domain or "/" in domain or ":" in domain or " " in domain:
            raise forms.ValidationError("a host name, e.g. shop.example.com (no scheme, port or path)")
        return domain

    def clean(self) -> dict:
        cleaned = super().clean() or {}
        floor, rate = cleaned.get("min_requests_per_second"), cleaned.get("requests_per_second")
        if floor is not None and rate is not None and floor > rate:
            self.add_error("min_requests_per_second", "the floor cannot be above the policy's rate")
        return cleaned


@admin.register(DomainPolicy)
class DomainPolicyAdmin(admin.ModelAdmin):
    form = DomainPolicyForm
    list_display = (
        "domain",
        "grouping",
        "requests_per_second",
        "rate_now",
        "burst",
        "max_concurrency",
        "obey_robots",
        "egress",
        "note",
        "updated_at",
    )
    search_fields = ("domain",)
    readonly_fields = ("live_state", "updated_at")
    fields = (*DomainPolicyForm.Meta.fields, "live_state", "updated_at")

    @admin.display(description="egress proxy")
    def egress(self, obj: DomainPolicy) -> str:
        return proxy_url_masked(obj.egress_proxy) if obj.egress_proxy else "(service default)"

    @admin.display(description="rate now (Redis)")
    def rate_now(self, obj: DomainPolicy) -> str:
        """The rate the domain is granted right now: the adaptive rate or the Crawl-delay's when
        lower than the policy's."""
        try:
            state = domain_state_get(domain=_group_of(obj))
        except Exception:  # noqa: BLE001 - the list must open while Redis is down
            return "Redis unavailable"
        return f"{_rate_in_force(obj, state):g}/s"

    @admin.display(description="now (Redis)")
    def live_state(self, obj: DomainPolicy) -> str:
        if obj.pk is None:
            return "-"
        try:
            state = domain_state_get(domain=_group_of(obj))
        except Exception:  # noqa: BLE001 - the page must open while Redis is down
            return "Redis unavailable"
        tokens = "full" if state.tokens is None else f"{state.tokens:.1f}"
        crawl = "none" if state.crawl_delay_s is None else f"{state.crawl_delay_s:g} s"
        line = ", ".join(f"{n} {p}" for p, n in state.in_line.items() if n) or "none"
        return (
            f"rate now {_rate_in_force(obj, state):g}/s (policy {obj.requests_per_second:g}/s); "
            f"{state.in_flight} in flight; tokens {tokens}; paused {state.cooldown_s:.0f} s more; "
            f"waiting in line {line}; robots.txt Crawl-delay {crawl}"
        )


def _group_of(obj: DomainPolicy) -> str:
    # A policy on shop.com grouping by registrable domain keeps its state under that domain; a
    # host policy under the host (which is what the policy's domain is).
    return registrable_domain(obj.domain) if obj.grouping == DomainGrouping.REGISTRABLE else obj.domain


def _rate_in_force(obj: DomainPolicy, state: DomainState) -> float:
    rate = min(obj.requests_per_second, state.adaptive_rps or obj.requests_per_second)
    if state.crawl_delay_s:
        rate = min(rate, 1 / state.crawl_delay_s)
    return round(rate, 3)
