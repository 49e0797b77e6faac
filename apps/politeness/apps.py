from django.apps import AppConfig


class PolitenessConfig(AppConfig):
    name = "apps.politeness"
    label = "politeness"
