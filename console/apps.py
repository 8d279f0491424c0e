from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The console's shell: page layout, the JSON API's assembly, the deployments' served model names handed to
    access, and (migrations/) the history of the tables from before the console was split into domain apps,
    which those apps took over."""

    name = "console"
    verbose_name = "Hearth console"

    def ready(self) -> None:
        """Hand access the deployments' served model names, which it may not import (console.access.served_models),
        and register the checks of the appliance's settings (appliance.system_checks)."""
        from appliance import system_checks  # noqa: F401 - registers them
        from console.access import served_models

        served_models.read_with(_served_names)


def _served_names() -> set[str]:
    """Every deployment's served model name, read now."""
    from console.deployments.models import Deployment

    return set(Deployment.objects.values_list("served_model_name", flat=True))
