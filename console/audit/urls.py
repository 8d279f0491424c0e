from django.urls import path

from console.audit import views

app_name = "audit"
urlpatterns = [
    path("audit/", views.audit_page, name="log"),
    path("audit/export.csv", views.audit_export, {"fmt": "csv"}, name="export_csv"),
    path("audit/export.json", views.audit_export, {"fmt": "json"}, name="export_json"),
]
