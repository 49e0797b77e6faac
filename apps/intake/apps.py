from django.apps import AppConfig


class IntakeConfig(AppConfig):
    name = "apps.intake"
    label = "intake"

    def ready(self) -> None:
        from apps.intake import schema  # noqa: F401, PLC0415 - registers the OpenAPI extension
