"""The API's own pages: its OpenAPI schema and the docs page that renders it. The job routes are
intake's and query's (apps/intake/urls.py, apps/query/urls.py); scrapejobs/urls.py puts all three
under /api/v1/."""

from django.urls import path
from drf_spectacular.views import SpectacularSwaggerView
from rest_framework.permissions import AllowAny

from apps.api.views import CachedSchemaView
from apps.tenants.throttling import AddressRateThrottle

# The schema and its page need no token; they are rate-limited per client address instead.
_open = {
    "authentication_classes": [],
    "permission_classes": [AllowAny],
    "throttle_classes": [AddressRateThrottle],
}

urlpatterns = [
    path("schema", CachedSchemaView.as_view(**_open), name="schema"),
    path("docs", SpectacularSwaggerView.as_view(url_name="schema", **_open), name="docs"),
]
