"""The Batches pages' URLs (console.batches.views), under /batch-jobs/: apart from /batches and /files, the paths a
client whose base URL lacks /v1 asks for (which the gateway may answer with the fix: gateway.wrong_urls). A browser
at /batches/ (no API key: the gateway leaves it to the console) is sent to the Batches page."""

from django.urls import path
from django.views.generic import RedirectView

from console.batches import views

app_name = "batches"
urlpatterns = [
    path("batch-jobs/", views.batch_list, name="list"),
    path("batches/", RedirectView.as_view(pattern_name="batches:list"), name="guessed"),
    path("batch-jobs/table/", views.batch_rows, name="table"),
    path("batch-jobs/<str:public_id>/", views.batch_detail, name="detail"),
    path("batch-jobs/<str:public_id>/progress/", views.batch_progress, name="progress"),
    path("batch-jobs/<str:public_id>/cancel/", views.batch_cancel, name="cancel"),
    path("batch-jobs/<str:public_id>/<str:which>.jsonl", views.batch_file, name="file"),
]
