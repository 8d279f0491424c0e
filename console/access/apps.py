from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "console.access"
    label = "access"

    def ready(self) -> None:
        from console.access import system_checks  # noqa: F401 - registers the sign-in settings' system checks
