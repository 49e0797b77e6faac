"""The jobs ledger: one row per job, one row per attempt. Everything else rests on these."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from apps.jobs.ids import uuid7


class JobStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # A tombstone (FR-52, docs/erasure.md): the tenant erased the job after it ended. Its id,
    # tenant, timestamps, counts and batch place stay (lists, cursors and counts stay whole);
    # its request, answer, stored objects and webhook URLs are gone. Final, never announced,
    # never exported; GET /jobs/{id} answers 410 job_erased.
    ERASED = "erased"


FINAL_STATUSES = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.ERASED)


class Priority(models.TextChoices):
    HIGH = "high"
    NORMAL = "normal"
    LOW = "low"


class Method(models.TextChoices):
    GET = "GET"
    HEAD = "HEAD"
    POST = "POST"


class Render(models.TextChoices):
    """How a job's URL is fetched (FR-30): ``none`` is the plain HTTP fetch; ``browser`` loads
    the page in headless Chromium and stores the HTML after its scripts ran
    (docs/design/browser.md)."""

    NONE = "none"
    BROWSER = "browser"


class AttemptOutcome(models.TextChoices):
    SUCCEEDED = "succeeded"
    # A failure another attempt may cure (timeout, connection error, 429, 5xx...).
    TEMPORARY = "failed_temporary"
    # A failure another attempt would repeat (404, 401, refused address, body too large...).
    PERMANENT = "failed_permanent"
    CANCELLED = "cancelled"
    # The worker vanished (killed, lease expired); recorded by the sweeper.
    LOST = "lost"
    # Stopped before its fetch ended because a redirect hop's domain had no turn for it (NFR-24):
    # the job starts again from its own URL when that turn comes. Not counted: the fold adds it
    # to the job's deferred_attempts, which the claim and the planner leave out of the budget.
    DEFERRED = "deferred"


class WaitingFor(models.TextChoices):
    """What a queued job waits for (GET /jobs/{id} ``waiting_for``). The domain ones and
    ``dispatch`` after a refused gate are stored by the deferral; the others are read off the row."""

    DOMAIN_RATE = "domain_rate"  # its domain's requests per second are spent
    DOMAIN_CONCURRENCY = "domain_concurrency"  # its domain's requests in flight are at the cap
    DOMAIN_PAUSED = "domain_paused"  # its domain asked us to back off (Retry-After, cooldown)
    # Its place in its domain's line: higher-priority jobs, or its share among tenants, come first
    # (NFR-9, NFR-10 at the gate; apps.politeness.limiter).
    DOMAIN_TURN = "domain_turn"
    RETRY_BACKOFF = "retry_backoff"  # an attempt failed temporarily; the next one waits
    TENANT_SHARE = "tenant_share"  # due, waiting for its turn in the fair dispatch
    DISPATCH = "dispatch"  # sent to the workers (or the gate's state was unavailable)


def counted_attempts(*, attempts: int, deferred_attempts: int) -> int:
    """The attempts that count toward ``max_attempts`` (NFR-24): every attempt started but the
    deferrals. The one definition: the fold, the sweeper and the admin use this, the claim, the
    single-flight read, the fold's statement and a requeue ``counted_attempts_sql``; the table's
    CHECK constraint (``Meta``) says the same as ``attempts <= max_attempts + deferred_attempts``."""
    return attempts - deferred_attempts


def counted_attempts_sql(alias: str = "") -> str:
    """``counted_attempts`` as an SQL expression over ``jobs_job`` (``alias``: its alias there)."""
    prefix = f"{alias}." if alias else ""
    return f"({prefix}attempts - {prefix}deferred_attempts)"


# A job's timeout when it names none (FR-1). Also the shortest timeout whose expiry says something
# of the target for every tenant: a shorter one is the job's own choice (NFR-5, docs/design/politeness.md).
JOB_TIMEOUT_DEFAULT_S = 30


class Job(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    # No index of its own: jobs_tenant_newest (tenant, -id) serves every lookup by tenant.
    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.PROTECT, related_name="jobs", db_index=False
    )

    # The request.
    method = models.CharField(max_length=8, choices=Method.choices, default=Method.GET)
    url = models.TextField()
    headers = models.JSONField(default=dict, blank=True)
    body = models.TextField(null=True, blank=True)
    domain = models.CharField(max_length=255)  # indexed in Meta (jobs_job_domain_3f0e0f84)
    priority = models.CharField(max_length=8, choices=Priority.choices, default=Priority.NORMAL)
    callback_url = models.TextField(null=True, blank=True)
    timeout_s = models.PositiveIntegerField(default=JOB_TIMEOUT_DEFAULT_S)
    max_age_s = models.PositiveIntegerField(default=0)
    # Rendering (FR-30, docs/design/browser.md): ``browser`` jobs go to their own queue and
    # component; ``browser_options`` holds their validated options with defaults filled in (null
    # for plain jobs). db_default: rows written without the column (bulk loads of older parts)
    # are plain jobs, and adding the column rewrites nothing.
    render = models.CharField(
        max_length=8, choices=Render.choices, default=Render.NONE, db_default=Render.NONE
    )
    browser_options = models.JSONField(null=True, blank=True)
    # Re-fetching (FR-33, FR-34, docs/revalidation.md): ``revalidate`` asks the target with the
    # validators of the tenant's previous success of the same fetch key; ``callback_on`` "change"
    # sends the webhook only when the body changed. Both null for a job that did not ask (null
    # is false / "final"), so a plain job's row versions carry not a byte more.
    revalidate = models.BooleanField(null=True, blank=True)
    callback_on = models.CharField(max_length=8, null=True, blank=True)
    # The W3C traceparent of the request that created the job (FR-29, docs/tracing.md): the
    # publish, attempts and fold of the job are spans of that trace. Null when tracing is off,
    # and then intake's INSERT leaves the column out (apps/jobs/inserts.py).
    trace_context = models.TextField(null=True, blank=True)
    # The attempt limit: attempts that count (``attempts - deferred_attempts``) stop at it. A
    # requeue from the dead letters raises it by `attempt_budget` (what the caller asked for), so
    # attempt numbers keep growing and history stays unique.
    max_attempts = models.PositiveSmallIntegerField(default=5)
    attempt_budget = models.PositiveSmallIntegerField(default=5)

    # Idempotency: the key is unique per tenant; the fingerprint is the SHA-256 of the canonical
    # request body, so a replay with another body is told apart (422).
    idempotency_key = models.CharField(max_length=255, null=True, blank=True)
    idempotency_fingerprint = models.CharField(max_length=64, null=True, blank=True)

    # State.
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.QUEUED)
    # Attempts started (each one's number; the fencing token of the running one), deferred ones
    # included.
    attempts = models.PositiveSmallIntegerField(default=0)
    # Of those, the ones that ended as a deferral (NFR-24): not counted toward max_attempts.
    # db_default: raw INSERTs (apps/jobs/bulk.py, intake) need not name the column.
    deferred_attempts = models.PositiveSmallIntegerField(db_default=0, editable=False)
    last_error = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True, blank=True)  # first attempt
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    # A retry waits in the database, not in a worker or the broker: not published before this.
    not_before = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)

    # Why the job waits ("waiting_for"): the reason of the last domain deferral
    # (job_defer_for_domain) and the not_before it set. The reason holds only while not_before
    # still equals deferred_until: a retry or a requeue since then has set another not_before, so
    # nobody else has to clear these (apps/jobs/selectors.py job_waiting_for reads them).
    defer_reason = models.CharField(max_length=24, choices=WaitingFor.choices, null=True, blank=True)
    deferred_until = models.DateTimeField(null=True, blank=True)

    # Lease of the running attempt; the attempt number (`attempts`) is the fencing token.
    lease_owner = models.CharField(max_length=200, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)

    # Outbox: empty means "to be sent to the broker" (NFR-1).
    published_at = models.DateTimeField(null=True, blank=True)
    # Second outbox, for the end of a job: set to null in the same write that
    # makes the job final; the publisher turns it into webhook deliveries and stamps it.
    final_published_at = models.DateTimeField(null=True, blank=True)

    # Single-flight fetch (apps/jobs/singleflight.py): the request's fetch key (its fingerprint,
    # scoped to the tenant unless the tenant shares fetches), written by the worker when it first
    # decides about the job; and, while the job waits for another job's fetch of the same key,
    # when it began to wait (a parked job is queued but holds no message and no worker).
    fetch_key = models.CharField(max_length=64, null=True, blank=True, editable=False)
    fetch_parked_at = models.DateTimeField(null=True, blank=True, editable=False)

    # Bumped by every write of the row (each UPDATE of jobs_job sets version = version + 1 in the
    # same statement; tests/jobs/test_version.py holds every statement to it): the read cache
    # (apps/query/cache.py) carries it in its entry and refuses to store a row older than the one
    # it holds or was told of (a requeue, retention, a prune).
    version = models.BigIntegerField(db_default=0, editable=False)

    # Result metadata; the body itself is in object storage.
    result_key = models.CharField(max_length=512, null=True, blank=True)
    result_size = models.BigIntegerField(null=True, blank=True)
    result_sha256 = models.CharField(max_length=64, null=True, blank=True)
    result_content_type = models.CharField(max_length=255, null=True, blank=True)
    result_http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    result_stored_at = models.DateTimeField(null=True, blank=True)
    # The URL that gave the result after redirects, when not ``url`` itself (FR-25); NULL for a
    # job that was not redirected (the representation then shows ``url``).
    result_final_url = models.TextField(null=True, blank=True)
    # The target's response headers with the stored body: bounded and masked (FR-25).
    result_headers = models.JSONField(null=True, blank=True)
    # Whether the stored body differs (by SHA-256) from the tenant's previous success of the same
    # fetch key, and that job (FR-34): set by the fold for a job that asked (``revalidate`` or
    # ``callback_on``); null for every other job. ``changed`` is true for a first fetch.
    changed = models.BooleanField(null=True, blank=True)
    previous_job = models.UUIDField(null=True, blank=True)

    # Retention: when the retention task deleted the stored result. The row
    # keeps its result metadata; /result answers 410 and GET /jobs/{id} says result_expired.
    result_deleted_at = models.DateTimeField(null=True, blank=True)
    # Bulk intake (apps/batches): a job loaded from a batch carries the batch's id and
    # its row number there, the natural key that makes a retried load insert nothing twice
    # (apps/jobs/bulk.py). Plain columns, not a foreign key: apps/jobs imports no other app.
    batch_id = models.UUIDField(null=True, blank=True)
    batch_row = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            # jobs_bulk_merge (apps/jobs/bulk.py): ON CONFLICT on the natural key; also serves
            # GET /jobs?batch= and a batch's counts by status. Partial: jobs submitted one by one
            # are not in it and pay nothing for it.
            models.UniqueConstraint(
                fields=["batch_id", "batch_row"],
                condition=Q(batch_id__isnull=False),
                name="jobs_unique_batch_row",
            ),
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="jobs_unique_idempotency_key_per_tenant",
            ),
            models.CheckConstraint(
                condition=Q(attempts__lte=models.F("max_attempts") + models.F("deferred_attempts")),
                name="jobs_attempts_within_budget",
            ),
        ]
        # Every index here is paid for by every write that moves a job (the writer rewrites the
        # row and all of its indexes: a status change is never a HOT update), so each one names
        # the query that needs it (apps/jobs/migrations/0002_writer_indexes.py dropped the rest).
        # The publisher's queued-and-unpublished index is jobs_outbox_fair (apps/publishing's
        # migration; its queries are in apps/jobs/outbox.py). A new index or constraint on
        # jobs_job is declared here and migrated in apps/jobs, whichever app's query needs it
        # (AddIndexConcurrently where a live ledger must not be locked); the raw-SQL ones built
        # before that rule are listed in tests/jobs/test_job_indexes.py, which keeps it.
        indexes = [
            # jobs_lose_expired_leases (apps/jobs/sweeping.py): running rows by lease.
            models.Index(
                fields=["lease_expires_at"],
                condition=Q(status="running"),
                name="jobs_running_by_lease",
            ),
            # jobs_sweep_unclaimed (apps/jobs/sweeping.py): published but never taken.
            models.Index(
                fields=["published_at"],
                condition=Q(status="queued", published_at__isnull=False),
                name="jobs_published_untaken",
            ),
            # jobs_final_unannounced_lock (apps/jobs/final_notices.py), for the webhooks: final
            # jobs whose end is not yet announced.
            models.Index(
                fields=["finished_at"],
                condition=Q(status__in=["succeeded", "failed", "cancelled"], final_published_at__isnull=True),
                name="jobs_final_unannounced",
            ),
            # idempotency_keys_expire (apps/jobs/intake.py): keys still held, oldest first. Only
            # keyed jobs younger than the TTL (plus an hour) are in it.
            models.Index(
                fields=["created_at"],
                condition=Q(idempotency_key__isnull=False),
                name="jobs_idempotency_by_created",
            ),
            # job_list (apps/query/selectors.py): a tenant's jobs newest first, optionally by status.
            models.Index(fields=["tenant", "-id"], name="jobs_tenant_newest"),
            models.Index(fields=["tenant", "status", "-id"], name="jobs_tenant_status_newest"),
            models.Index(fields=["tenant", "priority", "-id"], name="jobs_tenant_priority_newest"),
            # The admin's domain filter (apps/jobs/admin.py) and a dead-letter group's jobs
            # (apps/scheduling/selectors.py): domain = %s. Django's automatic db_index also built a
            # varchar_pattern_ops twin for LIKE 'prefix%', which no query runs.
            models.Index(fields=["domain"], name="jobs_job_domain_3f0e0f84"),
            # Retention and exports (FR-12, FR-13). results_due_for_expiry
            # (apps/jobs/retention.py): stored results not yet deleted, oldest first.
            models.Index(
                fields=["result_stored_at"],
                condition=Q(result_key__isnull=False, result_deleted_at__isnull=True),
                name="jobs_result_unexpired",
            ),
            # export_jobs_page (apps/jobs/export_reads.py), keyset on (finished_at, id), and
            # jobs_prune_due (apps/jobs/retention.py): final jobs by the time they ended.
            models.Index(
                fields=["finished_at", "id"],
                condition=Q(status__in=["succeeded", "failed", "cancelled"]),
                name="jobs_final_by_finished",
            ),
            # job_list (apps/query/selectors.py) with ?changed= (FR-34): only the jobs that asked
            # whether their body changed (revalidate or callback_on) have a ``changed``, so only
            # they enter it; a plain job pays nothing for it.
            models.Index(
                fields=["tenant", "-id"],
                condition=Q(changed__isnull=False),
                name="jobs_tenant_changed_newest",
            ),
            # apps/jobs/singleflight.py: a young stored result for a key, and the jobs parked on it.
            # Also the tenant's previous success of a key for revalidation (FR-33,
            # apps/jobs/revalidation.py): every success is in it already, so that costs no entry.
            models.Index(
                fields=["fetch_key", "finished_at"],
                condition=Q(fetch_key__isnull=False),
                name="jobs_by_fetch_key",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} {self.method} {self.url} [{self.status}]"

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_STATUSES


class Attempt(models.Model):
    """One try at fetching a job's URL, numbered from 1, kept forever with the job."""

    # No index of its own: attempts_unique_job_number (job, number) serves every lookup by job.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempt_set", db_index=False)
    number = models.PositiveSmallIntegerField()
    worker = models.CharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=20, choices=AttemptOutcome.choices, null=True, blank=True)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    error_class = models.CharField(max_length=64, null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    # A rendered attempt (FR-32): how many requests the page made besides its document, and how
    # many of them were blocked (address guard, politeness, resource type, websockets). Null for
    # a plain fetch.
    subrequests_made = models.IntegerField(null=True, blank=True)
    subrequests_blocked = models.IntegerField(null=True, blank=True)
    # Retention: when the retention task deleted a body this attempt stored
    # that is not its job's result (an orphan), or its job's result when that expired.
    body_deleted_at = models.DateTimeField(null=True, blank=True)
    # Set when this attempt did not fetch: it was served the stored outcome of attempt
    # ``served_from_attempt`` of job ``served_from_job`` (single-flight fetch). No foreign key:
    # the source may belong to another tenant (sharing) and outlive nothing here.
    served_from_job = models.UUIDField(null=True, blank=True)
    served_from_attempt = models.PositiveSmallIntegerField(null=True, blank=True)
    # Set when the target answered 304 Not Modified to this attempt's conditional request
    # (FR-33): the job whose stored body it kept (the tenant's previous success of the key).
    revalidated_from = models.UUIDField(null=True, blank=True)

    class Meta:
        indexes = [
            # orphan_bodies_due (apps/jobs/retention.py): attempts that may have left a body in
            # storage that is not their job's result: lost with their worker (its upload may have
            # finished), or failed after or while storing (an abandoned upload lands late).
            models.Index(
                fields=["finished_at"],
                condition=Q(body_deleted_at__isnull=True)
                & (Q(outcome="lost") | Q(error_class__in=["storage_error", "internal_error"])),
                name="attempts_orphan_body",
            ),
        ]
        constraints = [
            # The natural key: a replayed receipt for the same attempt can change nothing.
            models.UniqueConstraint(fields=["job", "number"], name="attempts_unique_job_number"),
        ]
        ordering = ["job", "number"]

    def __str__(self) -> str:
        return f"{self.job_id}#{self.number} {self.outcome or 'running'}"


class InFlightFetch(models.Model):
    """The fetch of one fetch key in flight: the job elected to fetch it and the attempt it was
    elected for. The primary key is the fetch key, so an insert only one job can win elects it;
    the row lives while that attempt is to come or running, and is released (and the jobs
    waiting on it served or handed over) when it ends (apps/jobs/singleflight.py)."""

    key = models.CharField(max_length=64, primary_key=True)
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="+")
    attempt = models.PositiveSmallIntegerField()
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.key[:12]}… by {self.job_id}#{self.attempt}"
