from django.apps import AppConfig


class WeightsConfig(AppConfig):
    name = "console.weights"
    label = "weights"
