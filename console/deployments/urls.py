from django.urls import path

from console.deployments import views

app_name = "deployments"
urlpatterns = [
    path("deployments/", views.deployments_page, name="list"),
    path("deployments/plan/", views.plan_preview, name="plan"),
    path("deployments/<int:pk>/", views.deployment_page, name="detail"),
    path("deployments/<int:pk>/status/", views.deployment_status, name="status"),
    path("deployments/<int:pk>/logs/", views.deployment_logs, name="logs"),
    path("deployments/<int:pk>/launch/", views.deployment_action, {"action": "launch"}, name="launch"),
    path("deployments/<int:pk>/stop/", views.deployment_action, {"action": "stop"}, name="stop"),
    path("deployments/<int:pk>/sleep/", views.deployment_action, {"action": "sleep"}, name="sleep"),
    path("deployments/<int:pk>/wake/", views.deployment_action, {"action": "wake"}, name="wake"),
    path("deployments/<int:pk>/change/", views.deployment_change, name="change"),
    path("deployments/<int:pk>/remedy/", views.deployment_action, {"action": "remedy"}, name="remedy"),
    path("deployments/<int:pk>/delete/", views.deployment_delete, name="delete"),
    path("deployments/<int:pk>/export/", views.deployment_export, name="export"),
    path("deployments/<int:pk>/export/<str:target>/", views.deployment_export_file, name="export-file"),
    path("deployments/external/", views.external_register, name="external"),
    path("deployments/<int:pk>/endpoints/add/", views.endpoint_add, name="add-endpoint"),
    path("deployments/<int:pk>/endpoints/<int:replica_id>/remove/", views.endpoint_remove, name="remove-endpoint"),
]
