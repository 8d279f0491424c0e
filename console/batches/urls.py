"""The Batches pages' URLs (console.batches.views)."""

from django.urls import path

from console.batches import views

app_name = "batches"
urlpatterns = [
    path("batches/", views.batch_list, name="list"),
    path("batches/table/", views.batch_rows, name="table"),
    path("batches/<str:public_id>/", views.batch_detail, name="detail"),
    path("batches/<str:public_id>/progress/", views.batch_progress, name="progress"),
    path("batches/<str:public_id>/cancel/", views.batch_cancel, name="cancel"),
    path("batches/<str:public_id>/<str:which>.jsonl", views.batch_file, name="file"),
]
