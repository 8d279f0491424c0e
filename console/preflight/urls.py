from django.urls import path

from console.preflight import views

app_name = "preflight"
urlpatterns = [
    path("doctor/", views.doctor_page, name="page"),
    path("doctor/checks/", views.doctor_checks, name="checks"),
    path("settings/", views.settings_page, name="settings"),
    path("settings/support-bundle.txt", views.support_bundle, name="bundle"),
]
