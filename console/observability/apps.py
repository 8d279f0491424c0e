from django.apps import AppConfig


class ObservabilityConfig(AppConfig):
    name = "console.observability"
    label = "observability"
