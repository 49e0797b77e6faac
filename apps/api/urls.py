"""The API's own pages: its OpenAPI schema and the docs page that renders it. The job routes are
intake's and query's (apps/intake/urls.py, apps/query/urls.py); scrapejobs/urls.py puts all three
under /api/v1/."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.permissions import AllowAny

# The schema and its page need no token (and are not rate limited).
_open = {"authentication_classes": [], "permission_classes": [AllowAny], "throttle_classes": []}

urlpatterns = [
    path("schema", SpectacularAPIView.as_view(**_open), name="schema"),
    path("docs", SpectacularSwaggerView.as_view(url_name="schema", **_open), name="docs"),
]
