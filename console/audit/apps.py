from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "console.audit"
    label = "audit"

    def ready(self) -> None:
        from console.audit import signals  # noqa: F401 - connects the sign-in receivers
