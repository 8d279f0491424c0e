from django.urls import path

from console.capacity import views

app_name = "capacity"
urlpatterns = [
    path("deployments/<int:pk>/capacity/", views.capacity_page, name="deployment"),
    path("deployments/<int:pk>/capacity/slo/", views.slo, name="slo"),
    path("deployments/<int:pk>/capacity/tune/", views.start_tuning, name="tune"),
    path("capacity/runs/<int:pk>/", views.run_page, name="run"),
    path("capacity/runs/<int:pk>/status/", views.run_status, name="run-status"),
    path("capacity/runs/<int:pk>/cancel/", views.run_cancel, name="cancel"),
    path("capacity/runs/<int:pk>/export.json", views.run_export, {"fmt": "json"}, name="export-json"),
    path("capacity/runs/<int:pk>/export.csv", views.run_export, {"fmt": "csv"}, name="export-csv"),
    path("capacity/compare/", views.compare_page, name="compare"),
    path("capacity/tunings/<int:pk>/", views.tuning_page, name="tuning"),
    path("capacity/tunings/<int:pk>/status/", views.tuning_status, name="tuning-status"),
    path("capacity/tunings/<int:pk>/cancel/", views.tuning_action, {"action": "cancel"}, name="tuning-cancel"),
    path("capacity/tunings/<int:pk>/apply/", views.tuning_action, {"action": "apply"}, name="tuning-apply"),
]
