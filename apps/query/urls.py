from django.urls import path

from apps.query.views import JobAttemptsView, JobResultView, job_detail

# GET /jobs (the list) shares its path with POST /jobs: scrapejobs/urls.py joins the two.
urlpatterns = [
    path("jobs/<str:job_id>", job_detail, name="job-detail"),
    path("jobs/<str:job_id>/attempts", JobAttemptsView.as_view(), name="job-attempts"),
    path("jobs/<str:job_id>/result", JobResultView.as_view(), name="job-result"),
]
