from django.urls import path

from apps.results import views

app_name = "results"

urlpatterns = [
    path("<str:token>", views.result_download, name="download"),
]
