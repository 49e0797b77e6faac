from django.apps import AppConfig


class ApiConfig(AppConfig):
    """Installed only so that ready() registers the OpenAPI extension; no models."""

    name = "apps.api"
    label = "api"

    def ready(self) -> None:
        from apps.api import schema  # noqa: F401, PLC0415 - registers the OpenAPI extension
