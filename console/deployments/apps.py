from django.apps import AppConfig


class DeploymentsConfig(AppConfig):
    name = "console.deployments"
    label = "deployments"
