from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.generic import RedirectView

from console import views

app_name = "console"
urlpatterns = [
    path("", RedirectView.as_view(pattern_name="console:deployments"), name="home"),
    path("setup/", views.setup, name="setup"),
    path("login/", views.login_page, name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("models/", views.models_page, name="models"),
    path("deployments/", views.deployments_page, name="deployments"),
    path("deployments/plan/", views.plan_preview, name="plan"),
    path("deployments/<int:pk>/", views.deployment_page, name="deployment"),
    path("deployments/<int:pk>/panel/", views.deployment_panel, name="panel"),
    path("deployments/<int:pk>/launch/", views.deployment_action, {"action": "launch"}, name="launch"),
    path("deployments/<int:pk>/stop/", views.deployment_action, {"action": "stop"}, name="stop"),
    path("deployments/<int:pk>/change/", views.deployment_change, name="change"),
    path("deployments/<int:pk>/remedy/", views.deployment_action, {"action": "remedy"}, name="remedy"),
    path("deployments/<int:pk>/delete/", views.deployment_delete, name="deployment-delete"),
    path("models/<int:pk>/delete/", views.model_delete, name="model-delete"),
    path("keys/", views.keys_page, name="keys"),
    path("keys/<int:pk>/revoke/", views.key_revoke, name="key-revoke"),
    path("doctor/", views.doctor_page, name="doctor"),
    path("doctor/checks/", views.doctor_checks, name="doctor-checks"),
]
