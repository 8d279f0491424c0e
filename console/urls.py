"""Every URL of the Django side (ROOT_URLCONF): the JSON API and each domain's pages. ``/v1`` and
``/metrics`` never reach Django (appliance.asgi sends them to the gateway)."""

from django.urls import include, path

from console import error_pages
from console.api import api
from console.observability import views

handler404 = error_pages.not_found
handler500 = error_pages.server_error

urlpatterns = [
    path("api/", api.urls),
    path("", views.dashboard, name="home"),  # the dashboard is the console's home
    path("", include("console.access.urls")),
    path("", include("console.catalog.urls")),
    path("", include("console.weights.urls")),
    path("", include("console.deployments.urls")),
    path("", include("console.observability.urls")),
    path("", include("console.preflight.urls")),
    path("", include("console.audit.urls")),
    path("", include("console.usage.urls")),
    path("", include("console.capacity.urls")),
    path("", include("console.alerts.urls")),
    path("", include("console.batches.urls")),
]
