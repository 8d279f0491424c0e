from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The console's shell: page layout, the JSON API's assembly, and (migrations/) the history of the
    tables from before the console was split into domain apps, which those apps took over."""

    name = "console"
    verbose_name = "Hearth console"
