from django.urls import path

from apps.query.views import JobAttemptsView, JobDetailView, JobResultView

# GET /jobs (the list) shares its path with POST /jobs: scrapejobs/urls.py joins the two.
urlpatterns = [
    path("jobs/<str:job_id>", JobDetailView.as_view(), name="job-detail"),
    path("jobs/<str:job_id>/attempts", JobAttemptsView.as_view(), name="job-attempts"),
    path("jobs/<str:job_id>/result", JobResultView.as_view(), name="job-result"),
]
