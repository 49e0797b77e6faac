"""A job served another tenant's fetch (single-flight, tenants that both share fetches) gets a
signed link to the same stored body, and neither the link nor the object's key names the other
tenant's job (NFR-6: ``served_from`` hides it too). Jobs in through HTTP, the worker's attempt and
the writer's fold in this process against a real local target; local storage and S3 (moto)."""

from __future__ import annotations

import base64
import urllib.parse
import zlib

import pytest
from django.core import signing

from apps.jobs.models import Job, JobStatus
from apps.jobs.receipt_fold import attempts_apply_finished
from apps.results.links import _SALT
from apps.scraping.attempt import job_run_attempt
from apps.tenants.models import Tenant
from tests.results.test_storage import s3_results  # noqa: F401 - a fixture

pytestmark = pytest.mark.django_db(transaction=True)


def _run(api, url: str) -> Job:
    r = api.post("/api/v1/jobs", {"url": url, "max_age_s": 600}, format="json")
    assert r.status_code == 202, r.content
    receipt = job_run_attempt(job_id=r.json()["id"], worker="w:1:1")
    if receipt is not None:
        attempts_apply_finished([receipt])
    return Job.objects.get(id=r.json()["id"])


def _sharing_pair(make_tenant, target):
    (a, _, api_a), (b, _, api_b) = make_tenant(), make_tenant()
    Tenant.objects.filter(id__in=[a.id, b.id]).update(share_fetches=True)
    fetched = _run(api_a, target.url("/bytes/500"))
    served = _run(api_b, target.url("/bytes/500"))
    assert fetched.status == served.status == JobStatus.SUCCEEDED
    assert served.result_key == fetched.result_key  # one stored body
    link = api_b.get(f"/api/v1/jobs/{served.id}/result").json()["url"]
    return fetched, served, link, api_b


def _forms(job: Job) -> list[str]:
    """The job's id, and the day it was created (keys were once dated by the source job's day)."""
    day = job.created_at
    return [str(job.id), job.id.hex, str(job.id).replace("-", ""), f"{day:%Y/%m/%d}", f"{day:%Y-%m-%d}"]


def _decoded_token(link: str) -> str:
    """Everything a holder of the link can read out of its token without the secret."""
    token = urllib.parse.unquote(urllib.parse.urlsplit(link).path.rstrip("/").rsplit("/", 1)[-1])
    payload = signing.loads(token, salt=_SALT)  # (this test knows the secret; a holder would not)
    raw = token.split(":", 1)[0]
    # signing.dumps compresses only when that is shorter, and says so with a leading "."
    data = base64.urlsafe_b64decode(raw.lstrip(".") + "=" * (-len(raw.lstrip(".")) % 4))
    text = (zlib.decompress(data) if raw.startswith(".") else data).decode()
    return f"{payload} {text}"


def test_a_served_local_link_and_its_file_name_no_other_tenants_job(make_tenant, target, local_results):  # noqa: F811
    fetched, _served, link, _ = _sharing_pair(make_tenant, target)
    seen = " ".join([link, urllib.parse.unquote(link), _decoded_token(link), fetched.result_key])
    stored = [str(p.relative_to(local_results)) for p in local_results.rglob("*") if p.is_file()]
    assert stored == [fetched.result_key]
    for form in _forms(fetched):
        assert form not in seen and form not in stored[0]


def test_a_served_s3_presigned_link_and_its_object_key_name_no_other_tenants_job(
    make_tenant,
    target,
    s3_results,  # noqa: F811
):
    client, bucket = s3_results
    fetched, _served, link, _ = _sharing_pair(make_tenant, target)
    assert "X-Amz-Signature=" in link
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert keys == [fetched.result_key]
    for form in _forms(fetched):
        assert form not in urllib.parse.unquote(link) and form not in keys[0]


def test_a_body_stored_under_the_old_dated_key_is_still_served(make_tenant, target, local_results):  # noqa: F811
    """Keys were ``<prefix>/<yyyy>/<mm>/<dd>/<name>/<attempt>``: a job stored so keeps its key
    (its row's result_key), its link serves it, and retention knows the key."""
    from apps.results.storage import result_keys_ever

    fetched, served, _, api_b = _sharing_pair(make_tenant, target)
    old_key = result_keys_ever(job_id=fetched.id, attempt=1)[2]
    assert f"{fetched.created_at:%Y/%m/%d}" in old_key
    (local_results / old_key).parent.mkdir(parents=True)
    (local_results / fetched.result_key).rename(local_results / old_key)
    Job.objects.filter(id__in=[fetched.id, served.id]).update(result_key=old_key)
    link = api_b.get(f"/api/v1/jobs/{served.id}/result").json()["url"]
    answer = api_b.get(urllib.parse.urlsplit(link).path)
    assert answer.status_code == 200
    assert b"".join(answer.streaming_content) == (local_results / old_key).read_bytes()
