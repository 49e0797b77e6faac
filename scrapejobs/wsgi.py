import gc
import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

from apps.operators.checks import refuse_insecure_start
from apps.runtime.logs import secrets_masked
from apps.tracing import tracing_start

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings.base")
# One trace per job (FR-29, docs/tracing.md): before the application loads its middleware, so
# that Django's instrumentation is in it; with tracing off nothing of OpenTelemetry is imported.
tracing_start(component="web", instrument=("django", "psycopg", "redis", "urllib3"), url_mask=secrets_masked)
application = get_wsgi_application()
refuse_insecure_start()  # no web with a public secret key, outside development (DJANGO_DEBUG)

# Import the URLconf and every view module now rather than on the first request, then take what
# is loaded (about 100,000 objects, all living as long as the process) out of the garbage
# collector's sight: a full collection walking them took 70-140 ms with the GIL held, every
# request of the process waiting, which made intake's p99 at a steady 300 requests/s.
# Full collections now walk only what requests created since.
get_resolver().url_patterns  # noqa: B018 - the import is the point
gc.freeze()
