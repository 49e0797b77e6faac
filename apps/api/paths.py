"""Where the API sits in the URL space, in one place.

``API_PATH_PREFIX`` is what every API path starts with: the middleware that skips the browser's
machinery for the API (scrapejobs/middleware.py) and the JSON 404/500 pages (apps/api/errors.py)
recognise API requests by it. ``API_V1_BASE`` is version 1's base path, under that prefix: the
URL configuration mounts the API there (scrapejobs/urls.py) and the links in answers are built
on it (apps/api/job_view.py, apps/batches/serializers.py).
"""

API_PATH_PREFIX = "/api/"
API_V1_BASE = f"{API_PATH_PREFIX}v1"
