from django.apps import AppConfig


class ObservabilityConfig(AppConfig):
    name = "console.observability"
    label = "observability"

    def ready(self) -> None:
        """The live panel, the charts, the engine's numbers and usage on every deployment's page
        (console.deployments.page_parts); the link to a key's requests on every key's page
        (console.access.page_parts)."""
        from console.access import page_parts as key_page
        from console.deployments import page_parts

        page_parts.add("live", "observability/deployment_live.html")
        page_parts.add("history", "observability/charts.html")
        page_parts.add("engine", "observability/deployment_engine.html")
        page_parts.add("usage", "observability/deployment_usage.html")
        key_page.add_link("observability/key_requests_link.html")
