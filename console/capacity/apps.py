from django.apps import AppConfig


class CapacityConfig(AppConfig):
    name = "console.capacity"
    label = "capacity"

    def ready(self) -> None:
        """The capacity check's link among an admin's links on every deployment's page
        (console.deployments.page_parts)."""
        from console.deployments import page_parts

        page_parts.add("links", "capacity/deployment_link.html")
