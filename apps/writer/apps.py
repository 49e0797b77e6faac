from django.apps import AppConfig


class WriterConfig(AppConfig):
    name = "apps.writer"
    label = "writer"
