from django.urls import path

from console.usage import views

app_name = "usage"
urlpatterns = [
    path("usage/", views.usage_page, name="page"),
    path("usage/export.csv", views.usage_export, name="export_csv"),
]
