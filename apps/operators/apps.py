from django.apps import AppConfig


class OperatorsConfig(AppConfig):
    name = "apps.operators"
    label = "operators"

    def ready(self) -> None:
        from apps.operators import checks  # noqa: F401, PLC0415 - registers the start-up checks
