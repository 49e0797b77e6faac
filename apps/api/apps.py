from django.apps import AppConfig


class ApiConfig(AppConfig):
    """The API's shared code (errors, paths, the OpenAPI extension in apps/api/schema.py, which
    REST_FRAMEWORK's DEFAULT_SCHEMA_CLASS imports where a schema is built, not here: NFR-42); no
    models."""

    name = "apps.api"
    label = "api"
