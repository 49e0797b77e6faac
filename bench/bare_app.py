"""The framework's floor for the intake benchmark: a plain Django view (no DRF, no token, no
validation, no idempotency) that inserts one job row, served by the same web command line (gunicorn, uvicorn workers, ASGI)
and the same settings (bench/bare_settings.py changes only the URLconf).

    DJANGO_SETTINGS_MODULE=bench.bare_settings gunicorn bench.bare_app:application
"""

from __future__ import annotations

import json
import os
from urllib.parse import urlsplit

from django.core.asgi import get_asgi_application
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.bare_settings")


@csrf_exempt
@require_POST
def create_job(request: HttpRequest) -> JsonResponse:
    from apps.jobs.models import Job

    url = json.loads(request.body)["url"]
    job = Job.objects.create(
        tenant_id=os.environ["BENCH_TENANT_ID"],
        url=url,
        domain=urlsplit(url).hostname or "",
        created_at=timezone.now(),
    )
    return JsonResponse({"id": str(job.id), "status": "queued"}, status=202)


urlpatterns = [path("api/v1/jobs", create_job)]

application = get_asgi_application()
