from django.apps import AppConfig


class ExportsConfig(AppConfig):
    name = "apps.exports"
    label = "exports"
