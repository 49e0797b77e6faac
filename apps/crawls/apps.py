from django.apps import AppConfig


class CrawlsConfig(AppConfig):
    name = "apps.crawls"
    label = "crawls"
