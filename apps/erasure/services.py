"""Erasing jobs (FR-52, docs/erasure.md): their objects first, then the tombstone, then what else
names them (webhook deliveries, crawl pages, dead receipts).

Objects go before the tombstone, outside any transaction: a delete that fails leaves its job as it
was (and the caller answers 503: ask again), never a tombstone whose body is still stored. Every
step is safe to repeat: a missing object counts as deleted, a tombstone is not made twice, and the
later steps run for tombstones too, so a crash between two steps is finished by the next call.

A body single-flight served to another job (its ``result_key`` names it), or kept for a later job's
304 (FR-33), stays while such a job refers to it: the job erased last removes it. Every job that
may refer to an object has the erased job's fetch key, so the check is an index range.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from apps.crawls.services import crawl_pages_erase
from apps.jobs.erasure import ERASABLE, ErasureTarget, erasure_targets, jobs_tombstone, result_keys_shared
from apps.jobs.models import JobStatus
from apps.results.storage import result_keys_ever, results_storage, screenshot_key
from apps.webhooks.services import webhook_deliveries_erase
from apps.writer.dead_receipts import dead_receipts_drop_of_jobs

logger = logging.getLogger(__name__)

# Parallel deletes: S3 answers each in a few milliseconds to tens of them (as retention).
_DELETE_THREADS = 8


class ErasureStorageFailed(Exception):
    """An object of the job could not be deleted (the storage is down): nothing was erased."""


class JobNotFinal(Exception):
    """The job is queued or running: cancel it first."""

    def __init__(self, status: str):
        super().__init__(status)
        self.status = status


@dataclass
class ErasureStats:
    jobs_erased: int = 0  # tombstones made now
    objects_deleted: int = 0  # object deletes asked of the storage (a missing object included)
    objects_kept_shared: int = 0  # objects another job still refers to
    not_final: list[uuid.UUID] = field(default_factory=list)
    storage_failures: list[uuid.UUID] = field(default_factory=list)


def job_erase(*, tenant_id: uuid.UUID, job_id: uuid.UUID) -> bool:
    """Erase one of the tenant's jobs (DELETE /jobs/{id}). False: no such job of the tenant.
    Raises ``JobNotFinal`` for a queued or running job and ``ErasureStorageFailed`` when the
    storage refused a delete (the job is then unchanged). A tombstone erased again: True."""
    targets = erasure_targets(job_ids=[job_id], tenant_id=tenant_id)
    if not targets:
        return False
    if targets[0].status not in (*ERASABLE, JobStatus.ERASED):
        raise JobNotFinal(targets[0].status)
    stats = jobs_erase(targets=targets)
    if stats.storage_failures:
        raise ErasureStorageFailed(str(job_id))
    return True


def jobs_erase_ids(*, job_ids: Sequence[uuid.UUID], tenant_id: uuid.UUID | None = None) -> ErasureStats:
    """``jobs_erase`` for ids (a batch's chunk, a tenant's)."""
    return jobs_erase(targets=erasure_targets(job_ids=job_ids, tenant_id=tenant_id))


def jobs_erase(*, targets: Sequence[ErasureTarget]) -> ErasureStats:
    """Erase the final jobs among ``targets``: delete their objects, make them tombstones, scrub
    their deliveries, crawl pages and dead receipts. Queued or running ones are left (listed in
    ``not_final``), as are those whose objects could not all be deleted (``storage_failures``)."""
    stats = ErasureStats()
    erasable = [t for t in targets if t.status in ERASABLE]
    stats.not_final = [t.id for t in targets if t.status not in (*ERASABLE, JobStatus.ERASED)]
    besides = [t.id for t in erasable]
    plans = [(t, _objects_of(t, besides=besides, stats=stats)) for t in erasable]
    storage = results_storage()

    def delete(plan: tuple[ErasureTarget, list[str]]) -> bool:
        for key in plan[1]:
            try:
                storage.delete(key)
            except Exception:  # noqa: BLE001 - any backend's failure: the job stays as it was
                logger.warning("erasure could not delete %s", key, exc_info=True)
                return False
        return True

    if plans:
        with ThreadPoolExecutor(max_workers=min(_DELETE_THREADS, len(plans))) as pool:
            done = list(pool.map(delete, plans))
    else:
        done = []
    cleared = [t.id for (t, keys), ok in zip(plans, done, strict=True) if ok]
    stats.objects_deleted = sum(len(keys) for (_, keys), ok in zip(plans, done, strict=True) if ok)
    stats.storage_failures = [t.id for (t, _), ok in zip(plans, done, strict=True) if not ok]
    stats.jobs_erased = len(jobs_tombstone(job_ids=cleared))
    # Tombstones made by an earlier call too: its later steps may not have run.
    scrub = cleared + [t.id for t in targets if t.status == JobStatus.ERASED]
    if scrub:
        webhook_deliveries_erase(job_ids=scrub)
        crawl_pages_erase(job_ids=scrub)
        dead_receipts_drop_of_jobs(job_ids=[str(i) for i in scrub])
    return stats


def _objects_of(target: ErasureTarget, *, besides: Sequence[uuid.UUID], stats: ErasureStats) -> list[str]:
    """Every key the job's attempts may have stored a body or a screenshot under, and its
    result's (its own or the one it was served), less those another job refers to."""
    bodies: list[str] = []
    for number in range(1, target.attempts + 1):
        bodies.extend(result_keys_ever(job_id=target.id, attempt=number))
    if target.result_key and target.result_key not in bodies:
        bodies.append(target.result_key)
    shared: set[str] = set()
    if target.fetch_key is not None:
        shared = result_keys_shared(fetch_key=target.fetch_key, keys=bodies, besides=besides)
    stats.objects_kept_shared += 2 * len(shared)
    keys: list[str] = []
    for body in bodies:
        if body not in shared:
            keys += [body, screenshot_key(body)]
    return keys
