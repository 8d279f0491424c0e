from django.urls import path

from console.observability import cost_views, views

app_name = "observability"
urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("dashboard/live/", views.dashboard_live, name="dashboard_live"),
    path("deployments/<int:pk>/panel/", views.deployment_panel, name="panel"),
    path("deployments/<int:pk>/series/", views.deployment_series, name="series"),
    path("deployments/<int:pk>/slo/", views.deployment_slo, name="slo"),
    path("requests/", views.request_log, name="requests"),
    path("requests/export.csv", views.request_log_csv, name="requests_csv"),
    path("costs/", cost_views.costs, name="costs"),
    path("metric-mappings/", views.mappings, name="mappings"),
]
