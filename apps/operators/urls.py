from django.urls import path

from apps.operators import views

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
    # Under admin/ for the operators (staff only); included before the admin's own URLs.
    path("admin/dashboard/", views.dashboard, name="operators-dashboard"),
]
