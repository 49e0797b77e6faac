"""Domain policies in the Django admin (contract sections 4 and 8, FR-9).

An operator adds or edits a domain's rate, burst and concurrency cap here; workers pick the change
up within ``apps.politeness.selectors.POLICY_CACHE_S``. The page also shows what Redis holds for
the domain right now (requests in flight, tokens, cooldown), read-only.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin

from apps.politeness.models import DomainPolicy
from apps.politeness.selectors import domain_state_get


class DomainPolicyForm(forms.ModelForm):
    class Meta:
        model = DomainPolicy
        fields = ("domain", "requests_per_second", "burst", "max_concurrency", "note")

    def clean_domain(self) -> str:
        # Jobs store their domain as the lowercase host name; a policy written "Example.COM" or
        # with a trailing dot would otherwise silently match nothing.
        domain = self.cleaned_data["domain"].strip().lower().rstrip(".")
        if not domain or "/" in domain or ":" in domain or " " in domain:
            raise forms.ValidationError("a host name, e.g. shop.example.com (no scheme, port or path)")
        return domain


@admin.register(DomainPolicy)
class DomainPolicyAdmin(admin.ModelAdmin):
    form = DomainPolicyForm
    list_display = ("domain", "requests_per_second", "burst", "max_concurrency", "note", "updated_at")
    search_fields = ("domain",)
    readonly_fields = ("live_state", "updated_at")
    fields = ("domain", "requests_per_second", "burst", "max_concurrency", "note", "live_state", "updated_at")

    @admin.display(description="now (Redis)")
    def live_state(self, obj: DomainPolicy) -> str:
        if obj.pk is None:
            return "-"
        try:
            state = domain_state_get(domain=obj.domain)
        except Exception:  # noqa: BLE001 - the page must open while Redis is down
            return "Redis unavailable"
        tokens = "full" if state.tokens is None else f"{state.tokens:.1f}"
        return (
            f"{state.in_flight} in flight; tokens {tokens}; cooldown {state.cooldown_s:.0f} s; "
            f"deferred jobs booked {state.booked_ahead_s:.0f} s ahead"
        )
