"""The answers only the query endpoints give: pages of jobs and attempts, and a result link.
A job and an attempt themselves look the same everywhere: apps.api.serializers."""

from __future__ import annotations

from rest_framework import serializers

from apps.api.serializers import AttemptOutput, JobOutput


class JobPageOutput(serializers.Serializer):
    items = JobOutput(many=True)
    next_cursor = serializers.CharField(allow_null=True, help_text="Pass as ?cursor= for the next page.")


class AttemptPageOutput(serializers.Serializer):
    items = AttemptOutput(many=True)


class ScreenshotOutput(serializers.Serializer):
    url = serializers.URLField(help_text="Signed, expiring link to the full-page PNG; no token needed.")
    expires_at = serializers.DateTimeField()
    content_type = serializers.CharField()


class ResultOutput(serializers.Serializer):
    url = serializers.URLField(help_text="Signed, expiring link to the stored body; no token needed.")
    expires_at = serializers.DateTimeField()
    size = serializers.IntegerField()
    sha256 = serializers.CharField()
    content_type = serializers.CharField(allow_null=True)
    http_status = serializers.IntegerField(help_text="The target's HTTP status.")
    screenshot = ScreenshotOutput(
        allow_null=True,
        help_text='The page\'s screenshot, for render "browser" with browser.screenshot; null otherwise.',
    )
    headers = serializers.DictField(
        child=serializers.CharField(),
        help_text="The target's response headers (names in lower case, repeated ones joined with "
        "', '), at most 64 and 16 KiB; credential-like ones (Set-Cookie, …) masked.",
    )
