from django.apps import AppConfig


class CatalogConfig(AppConfig):
    name = "console.catalog"
    label = "catalog"
