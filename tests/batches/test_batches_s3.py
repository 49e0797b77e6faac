"""Batches on S3 (moto's server, the settings' own S3 backend): parts and the manifest are
objects under the batch's prefix, the loader reads them back, and a part changed on S3 fails the
batch; parts left without a manifest are found by listing and removed."""

from __future__ import annotations

import io
import uuid
from datetime import timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.test import override_settings

from apps.batches.loader import batch_load
from apps.batches.models import Batch
from apps.batches.parts import batch_objects_remove, orphan_batches
from apps.jobs.models import Job
from tests.results.test_storage import s3_results  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db


def _parquet(urls: list[str]) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.table({"url": urls}), out)
    return out.getvalue()


def _keys(client, bucket: str, batch_id: str) -> list[str]:
    listed = client.list_objects_v2(Bucket=bucket, Prefix=f"batches/{batch_id}/")
    return sorted(o["Key"].rsplit("/", 1)[1] for o in listed.get("Contents", []))


@override_settings(SCRAPEJOBS_BATCH_PART_ROWS=2)
def test_a_batch_on_s3_is_stored_as_parts_and_a_manifest_and_loads(s3_results, api):  # noqa: F811
    client, bucket = s3_results
    urls = [f"http://t.example/{i}" for i in range(5)] + ["ftp://t.example/"]
    r = api.post("/api/v1/batches", data=_parquet(urls), content_type="application/vnd.apache.parquet")
    assert r.status_code == 202, r.content
    batch_id = r.json()["id"]
    assert (r.json()["total"], r.json()["rejected"]) == (6, 1)
    assert _keys(client, bucket, batch_id) == [
        "manifest.json",
        "part-00000.parquet",
        "part-00001.parquet",
        "part-00002.parquet",
    ]
    assert batch_load(batch_id=uuid.UUID(batch_id)) == "loaded"
    assert _keys(client, bucket, batch_id) == []  # merged, so removed (FR-53)
    got = Job.objects.filter(batch_id=batch_id).order_by("batch_row").values_list("batch_row", "url")
    assert list(got) == [(i + 1, urls[i]) for i in range(5)]

    # A second batch whose part is replaced on S3 after intake: failed, nothing of it loaded.
    r = api.post("/api/v1/batches", data=_parquet(urls[:4]), content_type="application/vnd.apache.parquet")
    other = r.json()["id"]
    client.put_object(Bucket=bucket, Key=f"batches/{other}/part-00001.parquet", Body=_parquet(urls[:2]))
    assert batch_load(batch_id=uuid.UUID(other)) == "failed"
    assert "part 1" in Batch.objects.get(id=other).error
    assert not Job.objects.filter(batch_id=other).exists()


def test_parts_without_a_manifest_on_s3_are_found_and_removed(s3_results):  # noqa: F811
    client, bucket = s3_results
    orphan = uuid.uuid4()
    client.put_object(Bucket=bucket, Key=f"batches/{orphan}/part-00000.parquet", Body=b"x")
    assert orphan_batches(older_than=timedelta(seconds=0)) == [orphan]
    assert batch_objects_remove(batch_id=orphan) == 1
    assert _keys(client, bucket, str(orphan)) == []
