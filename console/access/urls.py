from django.contrib.auth import views as auth_views
from django.urls import path

from console.access import key_views, member_views, oidc, views

app_name = "access"
urlpatterns = [
    path("setup/", views.setup, name="setup"),
    path("login/", views.login_page, name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("password/", views.password_page, name="password"),
    path("oidc/authenticate/", oidc.OidcStart.as_view(), name="oidc_start"),
    path("oidc/callback/", oidc.OidcCallback.as_view(), name="oidc_callback"),
    path("keys/", key_views.keys_page, name="keys"),
    path("keys/<int:pk>/", key_views.key_page, name="key"),
    path("keys/<int:pk>/rotate/", key_views.key_rotate, name="rotate"),
    path("keys/<int:pk>/revoke/", key_views.key_revoke, name="revoke"),
    path("members/", member_views.members_page, name="members"),
    path("members/<int:pk>/", member_views.member_page, name="member"),
    path("members/<int:pk>/password/", member_views.member_password, name="member_password"),
]
