from django.urls import path

from console.catalog import views

app_name = "catalog"
urlpatterns = [
    path("models/", views.models_page, name="models"),
    path("models/<int:pk>/delete/", views.model_delete, name="delete"),
    path("models/demo/<str:name>/", views.demo_plan, name="demo-plan"),
]
