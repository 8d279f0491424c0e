from django.apps import AppConfig


class PreflightConfig(AppConfig):
    name = "console.preflight"
    label = "preflight"
