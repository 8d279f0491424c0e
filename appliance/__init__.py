"""The Django project: settings, URLs, the ASGI entry point, the Celery app, hardware and runtimes."""

from appliance.celery import app as celery_app

__all__ = ["celery_app"]
