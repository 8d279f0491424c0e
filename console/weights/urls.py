from django.urls import path

from console.weights import views

app_name = "weights"
urlpatterns = [
    path("weights/", views.cache_page, name="cache"),
    path("weights/free/", views.cache_free, name="free"),
]
