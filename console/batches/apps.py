from django.apps import AppConfig


class BatchesConfig(AppConfig):
    name = "console.batches"
    label = "batches"
