from django.urls import path

from console.alerts import views

app_name = "alerts"
urlpatterns = [
    path("alerts/", views.alerts_page, name="page"),
    path("alerts/rules/<str:kind>/", views.tune_rule, name="rule"),
    path("alerts/destination/", views.set_destination, name="destination"),
    path("alerts/test/", views.send_test_alert, name="test"),
]
