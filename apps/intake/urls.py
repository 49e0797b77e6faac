from django.urls import path

from apps.intake.views import JobCancelView

# POST /jobs shares its path with GET /jobs (the list): scrapejobs/urls.py joins the two.
urlpatterns = [
    path("jobs/<str:job_id>/cancel", JobCancelView.as_view(), name="job-cancel"),
]
