from django.urls import path

from console.preflight import views

app_name = "preflight"
urlpatterns = [
    path("doctor/", views.doctor_page, name="page"),
    path("doctor/checks/", views.doctor_checks, name="checks"),
]
