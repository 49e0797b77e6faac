"""How tokens and webhook secrets look in the API (FR-36, FR-37). Comments, not docstrings, on
the serializers: a docstring becomes the schema's description of the object."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from apps.jobs.models import AttemptOutcome
from apps.tenants.models import ApiToken, TokenScope


# POST /tokens. Unknown fields are refused, each by name, as everywhere in the API.
class TokenCreateInput(serializers.Serializer):
    name = serializers.CharField(max_length=200, help_text="What the token is for, to tell tokens apart.")
    scope = serializers.ChoiceField(
        choices=TokenScope.choices,
        help_text="admin: everything, tokens and webhook secrets included; full: submit, cancel and "
        "read; read: list and read only.",
    )
    expires_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        default=None,
        help_text="When the token stops working; null: never. A token that expires itself may only "
        "create tokens that expire no later.",
    )

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, Mapping):
            raise serializers.ValidationError(
                {"non_field_errors": [f"Expected a JSON object, got {type(data).__name__}."]}
            )
        unknown = sorted(set(data) - set(self.fields))
        if unknown:
            raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class TokenOutput(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    scope = serializers.ChoiceField(choices=TokenScope.choices)
    prefix = serializers.CharField(help_text="The token's first characters, to recognise it.")
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    last_used_at = serializers.DateTimeField(
        allow_null=True, help_text="Up to a minute behind (SCRAPEJOBS_TOKEN_LAST_USED_FLUSH_S)."
    )


class TokenCreatedOutput(TokenOutput):
    token = serializers.CharField(help_text="The secret: shown this once, stored only hashed.")


class TokenListOutput(serializers.Serializer):
    items = TokenOutput(many=True)


def token_representation(token: ApiToken) -> dict[str, Any]:
    return TokenOutput(token).data


class WebhookSecretOutput(serializers.Serializer):
    created_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(
        allow_null=True, help_text="When it stops signing; null for the current secret."
    )


class WebhookSecretsOutput(serializers.Serializer):
    current = WebhookSecretOutput()
    previous = WebhookSecretOutput(
        allow_null=True,
        help_text="The secret a rotation replaced, while it still signs beside the current one.",
    )


class WebhookSecretRotatedOutput(serializers.Serializer):
    secret = serializers.CharField(help_text="The new secret (whsec_…): shown this once.")
    created_at = serializers.DateTimeField()
    previous_expires_at = serializers.DateTimeField(
        help_text="Until when the replaced secret keeps signing beside the new one."
    )


# GET /usage (FR-49, docs/usage.md). ``from`` is a Python keyword: the fields are built, not declared.
USAGE_MAX_DAYS = 366


class UsageParams(serializers.Serializer):
    def get_fields(self) -> dict[str, serializers.Field]:
        return {
            "from": serializers.DateField(
                format="%Y-%m-%d", input_formats=["%Y-%m-%d"], help_text="First day (UTC), YYYY-MM-DD."
            ),
            "to": serializers.DateField(
                format="%Y-%m-%d",
                input_formats=["%Y-%m-%d"],
                help_text=f"Last day (UTC), YYYY-MM-DD, included; at most {USAGE_MAX_DAYS} days from `from`.",
            ),
        }

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        first, last = attrs["from"], attrs["to"]
        if last < first:
            raise serializers.ValidationError({"to": ["Must be on or after `from`."]})
        if (last - first).days + 1 > USAGE_MAX_DAYS:
            raise serializers.ValidationError(
                {"to": [f"The range may span at most {USAGE_MAX_DAYS} days (one call per year)."]}
            )
        return attrs


# One count per attempt outcome, every outcome present.
UsageAttemptsOutput = type(
    "UsageAttemptsOutput",
    (serializers.Serializer,),
    {outcome: serializers.IntegerField() for outcome in AttemptOutcome.values},
)


class UsageTotalsOutput(serializers.Serializer):
    jobs_submitted = serializers.IntegerField(
        help_text="Jobs submitted that day that have had an attempt (a job cancelled before its "
        "first attempt is not counted)."
    )
    attempts = UsageAttemptsOutput(help_text="Attempts that ended that day, by outcome.")
    bytes_stored = serializers.IntegerField(help_text="Body bytes stored by the attempts that fetched.")
    rendered_pages = serializers.IntegerField(
        help_text="Pages a browser rendered (render: browser) that succeeded."
    )
    batches = serializers.IntegerField(help_text="Batches created that day.")
    crawls = serializers.IntegerField(help_text="Crawls created that day.")


class UsageDayOutput(UsageTotalsOutput):
    date = serializers.DateField(source="day")


class UsageOutput(serializers.Serializer):
    def get_fields(self) -> dict[str, serializers.Field]:
        return {
            "from": serializers.DateField(),
            "to": serializers.DateField(),
            "days": UsageDayOutput(many=True, help_text="Every day of the range, oldest first."),
            "totals": UsageTotalsOutput(help_text="The sums over the range."),
        }
