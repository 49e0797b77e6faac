from django.apps import AppConfig


class ScrapingConfig(AppConfig):
    name = "apps.scraping"
    label = "scraping"
