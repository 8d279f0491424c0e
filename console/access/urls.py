from django.contrib.auth import views as auth_views
from django.urls import path

from console.access import views

app_name = "access"
urlpatterns = [
    path("setup/", views.setup, name="setup"),
    path("login/", views.login_page, name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("keys/", views.keys_page, name="keys"),
    path("keys/<int:pk>/revoke/", views.key_revoke, name="revoke"),
]
