from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "console.access"
    label = "access"
