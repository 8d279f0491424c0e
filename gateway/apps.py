from django.apps import AppConfig


class GatewayConfig(AppConfig):
    """The gateway holds no models now; it stays an app for its migrations, the history of the request log
    table it made before console.observability took it over."""

    name = "gateway"
    verbose_name = "Hearth gateway"
