from django.apps import AppConfig


class CapacityConfig(AppConfig):
    name = "console.capacity"
    label = "capacity"
