from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.permissions import AllowAny

from apps.intake.views import JobCancelView, JobCreateView
from apps.query.views import JobListView


class JobCollectionView(JobCreateView, JobListView):
    """/jobs answers POST (intake: submit) and GET (query: list); each method keeps its own view
    code and schema, this class only shares the path."""


# The schema and its page need no token (and are not rate limited).
_open = {"authentication_classes": [], "permission_classes": [AllowAny], "throttle_classes": []}

urlpatterns = [
    path("jobs", JobCollectionView.as_view(), name="jobs"),
    path("jobs/<str:job_id>/cancel", JobCancelView.as_view(), name="job-cancel"),
    path("schema", SpectacularAPIView.as_view(**_open), name="schema"),
    path("docs", SpectacularSwaggerView.as_view(url_name="schema", **_open), name="docs"),
]
