from django.urls import path

from console.observability import views

app_name = "observability"
urlpatterns = [
    path("deployments/<int:pk>/panel/", views.deployment_panel, name="panel"),
]
