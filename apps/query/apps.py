from django.apps import AppConfig


class QueryConfig(AppConfig):
    name = "apps.query"
    label = "query"
