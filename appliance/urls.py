"""URLs of the Django side: the console and the JSON API. ``/v1`` never reaches Django (appliance.asgi)."""

from django.urls import include, path

from console.api import api

urlpatterns = [
    path("api/", api.urls),
    path("", include("console.urls")),
]
