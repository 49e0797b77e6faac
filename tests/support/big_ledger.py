"""A ledger of a production's size, built in seconds with COPY: for the tests and benchmarks that
must show a page, a filter or a scrape costs the same at a million jobs as at ten.

``ledger_build(jobs=1_000_000, attempts_per_job=3)`` writes the rows straight into jobs_job and
jobs_attempt with text-format ``COPY ... FROM STDIN`` (the ORM would take minutes), then ANALYZEs
both tables so that the planner sees their real size. The rows look like a service that ran for a
week: mostly succeeded jobs, a share of dead letters with a spread of error classes and domains,
some queued, retrying and running jobs; ids are version-7 UUIDs of their creation time, so newest-
first pages and time windows behave as they do on a live ledger.

Columns not named here keep their database defaults (NULL): a column added later needs a database
default (``db_default``) or a place in ``_JOB_COLUMNS`` to be filled."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import connection

# Failure classes a dead letter of the generated ledger ends with (NFR-3), most common first.
ERROR_CLASSES = ("http_404", "timeout", "http_503", "connection_error", "http_429", "dns_error", "tls_error")

_JOB_COLUMNS = (
    "id, tenant_id, method, url, headers, body, domain, priority, callback_url, timeout_s, "
    "max_age_s, max_attempts, attempt_budget, status, attempts, last_error, created_at, "
    "started_at, finished_at, updated_at, not_before, lease_owner, lease_expires_at, "
    "published_at, final_published_at, result_key, result_size, result_sha256, "
    "result_content_type, result_http_status, result_stored_at"
)
_ATTEMPT_COLUMNS = (
    "job_id, number, worker, started_at, finished_at, outcome, http_status, error_class, error, duration_ms"
)
_CHUNK_ROWS = 50_000
_NULL = "\\N"


@dataclass(frozen=True)
class Ledger:
    """What was built: the tenants' ids and names, the domains, and the counts written."""

    tenant_ids: list[uuid.UUID]
    domains: list[str]
    jobs: int
    attempts: int


def _uuid7_at(moment: datetime, rng: random.Random) -> uuid.UUID:
    """A version-7 UUID for ``moment``: 48 bits of Unix milliseconds, then random bits."""
    ms = int(moment.timestamp() * 1000)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | rng.getrandbits(12) << 64
    value |= 0b10 << 62 | rng.getrandbits(62)
    return uuid.UUID(int=value)


def _ts(moment: datetime | None) -> str:
    return _NULL if moment is None else moment.isoformat()


def _text(value: object) -> str:
    """One field of COPY's text format."""
    if value is None:
        return _NULL
    return str(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")


def _rows(
    *,
    jobs: int,
    attempts_per_job: int,
    tenant_ids: Sequence[uuid.UUID],
    domains: Sequence[str],
    seed: int,
    settled: bool = False,
) -> Iterator[tuple[str, list[str]]]:
    """(job line, attempt lines) for each job, oldest first, over the week before now; with
    ``settled``, none of the last minutes' jobs is still queued or running."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    start = now - timedelta(days=7)
    step = timedelta(days=7) / max(jobs, 1)
    for i in range(jobs):
        created = start + step * i
        job_id = _uuid7_at(created, rng)
        domain = domains[int(rng.paretovariate(1.2)) % len(domains)]
        tenant = tenant_ids[i % len(tenant_ids)]
        priority = rng.choices(("high", "normal", "low"), weights=(1, 6, 3))[0]
        roll = rng.random()
        recent = not settled and now - created < timedelta(minutes=10)
        status = "succeeded"
        if recent and roll < 0.5:
            status = "queued"
        elif recent and roll < 0.6:
            status = "running"
        elif roll < 0.08:
            status = "failed"
        elif roll < 0.09:
            status = "cancelled"
        error_class = rng.choice(ERROR_CLASSES) if status == "failed" else None
        n_attempts = 0 if status == "queued" else (attempts_per_job if status != "running" else 1)
        started = created + timedelta(seconds=rng.uniform(0.05, 3)) if n_attempts else None
        attempt_lines: list[str] = []
        moment = started
        for number in range(1, n_attempts + 1):
            assert moment is not None
            last = number == n_attempts
            duration = timedelta(milliseconds=rng.randint(40, 900))
            finished: datetime | None = moment + duration
            if status == "running" and last:
                outcome, http, err_class, err, finished = None, None, None, None, None
            elif status == "succeeded" and last:
                outcome, http, err_class, err = "succeeded", 200, None, None
            elif status == "failed" and last:
                outcome, err_class = "failed_permanent", error_class
                http = int(err_class[5:]) if err_class and err_class.startswith("http_") else None
                err = f"{err_class} from {domain}"
            elif status == "cancelled" and last:
                outcome, http, err_class, err = "cancelled", None, None, None
            else:
                outcome, http, err_class, err = "failed_temporary", 503, "http_503", "503 Service Unavailable"
            attempt_lines.append(
                "\t".join(
                    (
                        str(job_id),
                        str(number),
                        "bench-worker@host",
                        _ts(moment),
                        _ts(finished),
                        _text(outcome),
                        _text(http),
                        _text(err_class),
                        _text(err),
                        _NULL if finished is None else str(int(duration.total_seconds() * 1000)),
                    )
                )
            )
            moment = (finished or moment) + timedelta(seconds=rng.uniform(1, 30))
        final = status in ("succeeded", "failed", "cancelled")
        finished_at = moment if final and n_attempts else (created if status == "cancelled" else None)
        last_error = (
            json.dumps({"class": error_class, "message": f"{error_class} from {domain}", "http_status": None})
            if error_class
            else None
        )
        succeeded = status == "succeeded"
        job_line = "\t".join(
            (
                str(job_id),
                str(tenant),
                "GET",
                _text(f"https://{domain}/item/{i}?ref={rng.getrandbits(20)}"),
                "{}",
                _NULL,
                domain,
                priority,
                _NULL,
                "30",
                "0",
                str(max(n_attempts, attempts_per_job)),
                str(max(n_attempts, attempts_per_job)),
                status,
                str(n_attempts),
                _text(last_error),
                _ts(created),
                _ts(started),
                _ts(finished_at),
                _ts(finished_at or created),
                _NULL,
                "bench-worker@host" if status == "running" else _NULL,
                _ts(now + timedelta(seconds=60)) if status == "running" else _NULL,
                _NULL if status == "queued" else _ts(created),
                _ts(finished_at) if final else _NULL,
                f"results/{tenant}/{job_id}/1" if succeeded else _NULL,
                "2048" if succeeded else _NULL,
                ("0" * 64) if succeeded else _NULL,
                "text/html" if succeeded else _NULL,
                "200" if succeeded else _NULL,
                _ts(finished_at) if succeeded else _NULL,
            )
        )
        yield job_line, attempt_lines


def _copy(cursor: object, table: str, columns: str, lines: list[str]) -> None:
    with cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:  # type: ignore[attr-defined]
        copy.write("\n".join(lines) + "\n")


def ledger_build(
    *,
    jobs: int,
    attempts_per_job: int = 3,
    tenants: int = 10,
    domains: int = 200,
    seed: int = 0,
    settled: bool = False,
) -> Ledger:
    """Create ``tenants`` tenants and write ``jobs`` jobs with up to ``attempts_per_job`` attempts
    each (every final job has exactly that many; queued ones none, running ones one). ``settled``:
    every job final, its final published, as a ledger whose service has caught up (a benchmark
    that runs the service on it finds nothing of it to do). Returns what was built. Runs on
    Django's default connection, in whatever transaction the caller holds."""
    from apps.tenants.services import tenant_create

    suffix = uuid.uuid4().hex[:8]
    tenant_ids = [tenant_create(name=f"ledger-{suffix}-{n}").tenant.id for n in range(tenants)]
    domain_names = [f"site{n}.example" for n in range(domains)]
    job_buf: list[str] = []
    attempt_buf: list[str] = []
    written_jobs = written_attempts = 0
    with connection.cursor() as cursor:
        raw = cursor.cursor
        for job_line, attempt_lines in _rows(
            jobs=jobs,
            attempts_per_job=attempts_per_job,
            tenant_ids=tenant_ids,
            domains=domain_names,
            seed=seed,
            settled=settled,
        ):
            job_buf.append(job_line)
            attempt_buf.extend(attempt_lines)
            if len(job_buf) >= _CHUNK_ROWS:
                _copy(raw, "jobs_job", _JOB_COLUMNS, job_buf)
                _copy(raw, "jobs_attempt", _ATTEMPT_COLUMNS, attempt_buf)
                written_jobs += len(job_buf)
                written_attempts += len(attempt_buf)
                job_buf, attempt_buf = [], []
        if job_buf:
            _copy(raw, "jobs_job", _JOB_COLUMNS, job_buf)
        if attempt_buf:
            _copy(raw, "jobs_attempt", _ATTEMPT_COLUMNS, attempt_buf)
        written_jobs += len(job_buf)
        written_attempts += len(attempt_buf)
        cursor.execute("ANALYZE jobs_job")
        cursor.execute("ANALYZE jobs_attempt")
    return Ledger(tenant_ids=tenant_ids, domains=domain_names, jobs=written_jobs, attempts=written_attempts)


def ledger_counts() -> tuple[int, int]:
    """(jobs, attempts) in the ledger now: for a test to check what it built."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT (SELECT count(*) FROM jobs_job), (SELECT count(*) FROM jobs_attempt)")
        jobs, attempts = cursor.fetchone()
    return int(jobs), int(attempts)
