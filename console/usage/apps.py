from django.apps import AppConfig


class UsageConfig(AppConfig):
    name = "console.usage"
    label = "usage"
