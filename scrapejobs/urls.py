from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("", include("apps.operators.urls")),  # /healthz, /readyz, /metrics, dashboard
    path("admin/", admin.site.urls),
    path("api/v1/", include("apps.intake.urls")),  # POST /jobs, cancel, schema, docs
    path("api/v1/", include("apps.query.urls")),  # GET /jobs, /jobs/{id}, attempts, result
    path("results/", include("apps.results.urls")),  # signed local result links
]

# JSON errors for /api/ paths no view answered (Django's pages elsewhere); see apps/intake/errors.py.
handler404 = "apps.intake.errors.page_not_found"
handler500 = "apps.intake.errors.server_error"
