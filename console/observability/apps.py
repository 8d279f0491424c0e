from django.apps import AppConfig


class ObservabilityConfig(AppConfig):
    name = "console.observability"
    label = "observability"

    def ready(self) -> None:
        """The live panel and charts on every deployment's page (console.deployments.page_parts)."""
        from console.deployments import page_parts

        page_parts.add("live", "observability/deployment_live.html")
