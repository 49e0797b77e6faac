from django.contrib import admin
from django.urls import URLPattern, URLResolver, include, path
from django.views.generic import TemplateView

from apps.api.paths import API_V1_BASE
from apps.intake.views import JobCreateView
from apps.query.views import JobListView


class JobCollectionView(JobCreateView, JobListView):
    """/jobs answers POST (intake: submit) and GET (query: list); each method keeps its own view
    code and schema, this class only shares the path. It lives here, above both apps, because
    neither API app imports the other."""


api_v1: list[URLPattern | URLResolver] = [
    path("jobs", JobCollectionView.as_view(), name="jobs"),
    path("", include("apps.intake.urls")),  # POST /jobs/{id}/cancel
    path("", include("apps.query.urls")),  # GET /jobs/{id}, attempts, result
    path("", include("apps.batches.urls")),  # POST /batches, GET /batches/{id}
    path("", include("apps.account.urls")),  # the tenant's tokens and webhook secrets
    path("", include("apps.webhooks.urls")),  # the tenant's webhook deliveries, disabled callbacks
    path("", include("apps.crawls.urls")),  # POST /crawls, GET /crawls/{id} (docs/crawls.md)
    path("", include("apps.api.urls")),  # the OpenAPI schema and its docs page
]

urlpatterns = [
    # A person who opens the bare address finds the docs and the admin, not a 404.
    path("", TemplateView.as_view(template_name="landing.html"), name="landing"),
    path("", include("apps.operators.urls")),  # /healthz, /readyz, /metrics
    path("admin/", admin.site.urls),  # the operators' pages
    path(f"{API_V1_BASE.removeprefix('/')}/", include(api_v1)),  # /api/v1/
    path("results/", include("apps.results.urls")),  # signed local result links
]

# JSON errors for /api/ paths no view answered (Django's pages elsewhere); see apps/api/errors.py.
handler404 = "apps.api.errors.page_not_found"
handler500 = "apps.api.errors.server_error"
