"""A whole tenant erased by an operator (FR-54, ``manage.py erase_tenant``, docs/erasure.md).

Jobs first (``Job.tenant`` is PROTECT): in chunks of SCRAPEJOBS_ERASURE_CHUNK_SIZE, each job's
objects are deleted and its row made a tombstone as DELETE /jobs/{id} does (a body another
tenant's job was served keeps its object), then the rows are deleted with what hangs off them
(attempts, webhook deliveries). Then the batches (their objects, then their rows), the crawls,
the remaining deliveries, the tokens (each revoked first, so every web process forgets it at
once), and the tenant row with what cascades from it (disabled callbacks, usage rows).

Refused while a job of the tenant is queued or running (a worker could store a body after its
job was erased): cancel them first. Safe to run again after a failure: what is gone stays gone.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from apps.batches.models import Batch
from apps.batches.parts import batch_objects_remove
from apps.crawls.models import Crawl
from apps.erasure.services import jobs_erase_ids
from apps.jobs.models import Job, JobStatus
from apps.tenants.models import ApiToken, Tenant
from apps.tenants.services import token_revoke
from apps.webhooks.models import WebhookDelivery


class TenantHasUnfinishedJobs(Exception):
    def __init__(self, count: int):
        super().__init__(count)
        self.count = count


class TenantErasureStorageFailed(Exception):
    """The storage refused a delete: the jobs erased so far are gone, the rest are left."""


@dataclass
class TenantErasureStats:
    jobs: int = 0
    objects_deleted: int = 0
    objects_kept_shared: int = 0
    batches: int = 0
    batch_objects: int = 0
    crawls: int = 0
    webhook_deliveries: int = 0
    tokens: int = 0


def tenant_erase(*, tenant_id: uuid.UUID) -> TenantErasureStats:
    """Erase the tenant and everything it owns; returns what was removed."""
    unfinished = Job.objects.filter(
        tenant_id=tenant_id, status__in=[JobStatus.QUEUED, JobStatus.RUNNING]
    ).count()  # jobs_tenant_status_newest
    if unfinished:
        raise TenantHasUnfinishedJobs(unfinished)
    stats = TenantErasureStats()
    chunk = settings.SCRAPEJOBS_ERASURE_CHUNK_SIZE
    while ids := list(
        Job.objects.filter(tenant_id=tenant_id).order_by("id").values_list("id", flat=True)[:chunk]
    ):
        erased = jobs_erase_ids(job_ids=ids, tenant_id=tenant_id)
        stats.objects_deleted += erased.objects_deleted
        stats.objects_kept_shared += erased.objects_kept_shared
        if erased.storage_failures:
            raise TenantErasureStorageFailed(
                f"{len(erased.storage_failures)} jobs' objects could not be deleted"
            )
        if erased.not_final:  # requeued since the check
            raise TenantHasUnfinishedJobs(len(erased.not_final))
        with transaction.atomic():
            WebhookDelivery.objects.filter(job_id__in=ids).delete()
            stats.jobs += (
                Job.objects.filter(id__in=ids, status=JobStatus.ERASED).delete()[1].get(Job._meta.label, 0)
            )
    for batch_id in Batch.objects.filter(tenant_id=tenant_id).values_list("id", flat=True):
        stats.batch_objects += batch_objects_remove(batch_id=batch_id)
        Batch.objects.filter(id=batch_id).delete()
        stats.batches += 1
    stats.crawls = Crawl.objects.filter(tenant_id=tenant_id).delete()[1].get(Crawl._meta.label, 0)
    stats.webhook_deliveries = (
        WebhookDelivery.objects.filter(tenant_id=tenant_id).delete()[1].get(WebhookDelivery._meta.label, 0)
    )
    for token_id in ApiToken.objects.filter(tenant_id=tenant_id, revoked_at__isnull=True).values_list(
        "id", flat=True
    ):
        token_revoke(token_id=token_id, tenant_id=tenant_id)
    stats.tokens = ApiToken.objects.filter(tenant_id=tenant_id).delete()[1].get(ApiToken._meta.label, 0)
    Tenant.objects.filter(id=tenant_id).delete()
    return stats
