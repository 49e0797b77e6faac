"""The Celery application: queues, routes, time limits and the beat schedule, all in one place.

Queues: ``jobs.high``, ``jobs.normal``, ``jobs.low`` carry scrape messages (one per job, routed by
the job's priority); ``jobs.browser`` carries the rendered jobs' (FR-30, NFR-31: all priorities, in
the order the publisher chose), served by the browser component only; ``control`` carries the small bookkeeping tasks (publisher, sweeper, writer,
webhooks) so that they never wait behind a backlog of scrapes.
"""

from __future__ import annotations

import logging
import os

from celery import Celery
from celery.signals import after_setup_logger, beat_init, worker_init, worker_ready, worker_shutting_down
from kombu import Queue

from scrapejobs import broker
from scrapejobs.task_end_wake import TaskEndWakesLoop

logger = logging.getLogger(__name__)

# redis:// and rediss:// brokers through kombu's Redis transport with one repair (see there);
# before any connection is made, in every process (this module is imported first).
broker.transport_install()

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings.base")
# Celery's Django fixup runs Django's system checks when a worker or beat imports its task modules
# and drops what they find; their URL checks alone import every view, the OpenAPI schema and
# pyarrow, a third of a worker's start-up CPU spent on nothing it uses (NFR-42). The web process
# and manage.py (migrate, check) still run them; the unsafe-settings refusal every Celery process
# makes is _refuse_insecure_start below. CELERY_SKIP_CHECKS= (empty) in the environment runs them.
os.environ.setdefault("CELERY_SKIP_CHECKS", "1")

app = Celery("scrapejobs")
app.config_from_object("django.conf:settings", namespace="CELERY")

SCRAPE_QUEUES = ("jobs.high", "jobs.normal", "jobs.low")
BROWSER_QUEUE = "jobs.browser"
CONTROL_QUEUE = "control"
WEBHOOK_QUEUE = "webhooks"
# Batch loads (apps/batches): long COPY work, kept apart from the short control tasks.
BATCHES_QUEUE = "batches"

app.conf.task_queues = [
    Queue(name) for name in (*SCRAPE_QUEUES, BROWSER_QUEUE, CONTROL_QUEUE, WEBHOOK_QUEUE, BATCHES_QUEUE)
]
app.conf.task_default_queue = CONTROL_QUEUE
# Every task has both limits; the scrape task's are derived from the job's timeout in its code.
app.conf.task_soft_time_limit = 330
app.conf.task_time_limit = 360


# Releasing expired idempotency keys is housekeeping: hourly keeps the index at TTL + 1 h of keys.
IDEMPOTENCY_EXPIRE_INTERVAL_S = 3600
WEBHOOK_SECRETS_DROP_INTERVAL_S = 600
# Retention and the daily export are housekeeping too (FR-12, FR-13).
RETENTION_INTERVAL_S = 300
# How often a batch's erasure (FR-53) goes on: each run erases chunks for up to 50 s.
ERASURE_INTERVAL_S = 10
EXPORT_DAILY_INTERVAL_S = 3600
# Parts left without a manifest are removed after SCRAPEJOBS_BATCH_ORPHAN_GRACE_S; looking every
# 15 minutes keeps them at most that much longer.
BATCH_ORPHANS_INTERVAL_S = 900
# A batch's own callback (FR-10) is enqueued at most this long after its last job ended.
BATCH_CALLBACKS_INTERVAL_S = 5


def _beat_schedule() -> dict:
    from django.conf import settings  # noqa: PLC0415 - settings are read once Django is set up

    return {
        # Leased receipts writer (apps/writer), every SCRAPEJOBS_WRITER_FLUSH_INTERVAL_S. If it stops:
        # workers' receipts pile up in the Redis stream sj:receipts and jobs stay `running` (lag
        # grows in `manage.py writer_status`); nothing is lost, they are applied once it runs again.
        "writer-flush": {
            "task": "apps.writer.tasks.writer_flush",
            "schedule": settings.SCRAPEJOBS_WRITER_FLUSH_INTERVAL_S,
            "options": {
                "queue": CONTROL_QUEUE,
                "expires": max(settings.SCRAPEJOBS_WRITER_FLUSH_INTERVAL_S * 2, 2),
            },
        },
        # Outbox publisher. If it stops: accepted jobs are never sent to workers (intake still
        # answers 202, jobs sit in `queued` with an empty published_at; age of oldest job grows).
        "outbox-publish": {
            "task": "apps.publishing.tasks.outbox_publish",
            "schedule": settings.SCRAPEJOBS_PUBLISH_INTERVAL_S,
            "options": {"expires": max(settings.SCRAPEJOBS_PUBLISH_INTERVAL_S * 5, 5)},
        },
        # Stuck-sweeper. If it stops: jobs of a crashed worker stay `running` forever and jobs
        # whose broker message was lost stay `queued` forever.
        "stuck-sweep": {
            "task": "apps.scheduling.tasks.sweep_stuck_jobs",
            "schedule": settings.SCRAPEJOBS_SWEEP_INTERVAL_S,
            "options": {"queue": CONTROL_QUEUE, "expires": max(settings.SCRAPEJOBS_SWEEP_INTERVAL_S * 2, 10)},
        },
        # Idempotency keys older than SCRAPEJOBS_IDEMPOTENCY_TTL_HOURS are released. If it stops:
        # nothing a caller sees changes (intake never replays an expired key anyway); the unique
        # key index keeps every key ever used and grows.
        "idempotency-keys-expire": {
            "task": "apps.scheduling.tasks.idempotency_keys_expire",
            "schedule": IDEMPOTENCY_EXPIRE_INTERVAL_S,
            "options": {"queue": CONTROL_QUEUE, "expires": IDEMPOTENCY_EXPIRE_INTERVAL_S},
        },
        # End-of-job outbox. If it stops: jobs that became final are never announced (no webhook
        # deliveries are created; final jobs pile up with an empty final_published_at).
        "webhooks-enqueue-final": {
            "task": "apps.webhooks.tasks.webhooks_enqueue_final",
            "schedule": settings.SCRAPEJOBS_WEBHOOK_INTERVAL_S,
            "options": {
                "queue": CONTROL_QUEUE,
                "expires": max(settings.SCRAPEJOBS_WEBHOOK_INTERVAL_S * 5, 5),
            },
        },
        # Webhook deliverer (queue `webhooks`). If it stops: deliveries stay pending, callbacks
        # are not called (polling still shows every final state).
        "webhooks-deliver-due": {
            "task": "apps.webhooks.tasks.webhooks_deliver_due",
            "schedule": settings.SCRAPEJOBS_WEBHOOK_INTERVAL_S,
            "options": {
                "queue": WEBHOOK_QUEUE,
                "expires": max(settings.SCRAPEJOBS_WEBHOOK_INTERVAL_S * 5, 5),
            },
        },
        # Previous webhook secrets past their grace period are dropped (FR-23). If it stops: an
        # expired secret no longer signs (signing checks the time) but its text stays stored.
        "webhooks-secrets-drop-expired": {
            "task": "apps.webhooks.tasks.webhook_secrets_drop_expired",
            "schedule": WEBHOOK_SECRETS_DROP_INTERVAL_S,
            "options": {"queue": CONTROL_QUEUE, "expires": WEBHOOK_SECRETS_DROP_INTERVAL_S},
        },
        # Tokens' last use, recorded in Redis by each request, written to the database (FR-36). If
        # it stops: GET /tokens still shows the last use from Redis; the database's falls behind.
        "tenants-tokens-last-used-flush": {
            "task": "apps.tenants.tasks.tokens_last_used_flush",
            "schedule": settings.SCRAPEJOBS_TOKEN_LAST_USED_FLUSH_S,
            "options": {"queue": CONTROL_QUEUE, "expires": settings.SCRAPEJOBS_TOKEN_LAST_USED_FLUSH_S},
        },
        # Retention (apps/results/storage_retention.py): expired results, orphan bodies, old jobs when
        # SCRAPEJOBS_JOB_RETENTION_DAYS is set. If it stops: nothing is deleted, storage grows,
        # and old results keep answering 200 on /result past their retention.
        "results-retention": {
            "task": "apps.results.tasks.retention_run",
            "schedule": RETENTION_INTERVAL_S,
            "options": {"queue": CONTROL_QUEUE, "expires": RETENTION_INTERVAL_S},
        },
        # Batch erasure (apps/erasure/batches.py): the jobs of batches a DELETE /batches/{id} asked
        # to erase, in chunks. If it stops: those batches stay as they were, their erasure
        # reported as requested and not finished on GET /batches/{id}.
        "batches-erase": {
            "task": "apps.erasure.tasks.batches_erase",
            "schedule": ERASURE_INTERVAL_S,
            "options": {"queue": CONTROL_QUEUE, "expires": ERASURE_INTERVAL_S},
        },
        # Daily analytics export (apps/exports/export.py): each of the last two whole UTC days
        # without a manifest. If it stops: no new export appears; `manage.py export_jobs` makes
        # any window on demand.
        "exports-daily": {
            "task": "apps.exports.tasks.export_daily",
            "schedule": EXPORT_DAILY_INTERVAL_S,
            "options": {"queue": CONTROL_QUEUE, "expires": EXPORT_DAILY_INTERVAL_S},
        },
        # Batches (apps/batches): unfinished batches without a live loader lease go to a loader. If
        # it stops: a batch whose load message was lost, or whose loader died, stays `accepted` or
        # `loading` (its rows are not lost: parts and manifest wait in storage).
        "batches-resume": {
            "task": "apps.batches.tasks.batches_resume",
            "schedule": settings.SCRAPEJOBS_BATCH_RESUME_INTERVAL_S,
            "options": {
                "queue": CONTROL_QUEUE,
                "expires": max(settings.SCRAPEJOBS_BATCH_RESUME_INTERVAL_S * 2, 5),
            },
        },
        # Batches whose every job is final get their callback (apps/batches/completion.py). If it
        # stops: batches with a callback_url are never announced (GET /batches/{id} still shows
        # their jobs by status); a restart announces every one that ended meanwhile, once.
        "batches-completion-announce": {
            "task": "apps.batches.tasks.batches_completion_announce",
            "schedule": BATCH_CALLBACKS_INTERVAL_S,
            "options": {"queue": CONTROL_QUEUE, "expires": BATCH_CALLBACKS_INTERVAL_S * 2},
        },
        # Crawls (docs/crawls.md): links of crawl pages that ended become jobs, finished crawls end.
        # If it stops: running crawls stop growing and never end (their jobs still run); a
        # restart carries on where it was, each page expanded once.
        "crawls-expand": {
            "task": "apps.crawls.tasks.crawls_expand",
            "schedule": settings.SCRAPEJOBS_CRAWL_EXPAND_INTERVAL_S,
            "options": {
                "queue": CONTROL_QUEUE,
                "expires": max(settings.SCRAPEJOBS_CRAWL_EXPAND_INTERVAL_S * 2, 5),
            },
        },
        # Parts without a manifest (intake died midway) are removed after the grace period. If it
        # stops: they stay in storage (never loaded); batches stuck `receiving` are not failed.
        "batches-orphans-remove": {
            "task": "apps.batches.tasks.batches_orphans_remove",
            "schedule": BATCH_ORPHANS_INTERVAL_S,
            "options": {"queue": CONTROL_QUEUE, "expires": BATCH_ORPHANS_INTERVAL_S},
        },
        # Operators' rollups (apps/operators/rollup_runner.py). If it stops: the dashboard's charts and
        # the /metrics counters and time-to-first-attempt histogram stop moving (the live queue
        # figures still answer); nothing about jobs changes, and a restart catches up.
        "operators-rollup": {
            "task": "apps.operators.tasks.operators_rollup",
            "schedule": settings.SCRAPEJOBS_ROLLUP_INTERVAL_S,
            "options": {"queue": CONTROL_QUEUE, "expires": settings.SCRAPEJOBS_ROLLUP_INTERVAL_S},
        },
    }


@app.on_after_finalize.connect
def _install_beat_schedule(sender: Celery, **_: object) -> None:
    sender.conf.beat_schedule = _beat_schedule()


# Celery logs two INFO lines per task ("received", "succeeded in"): 400 lines a second at 200 jobs/s,
# about a twelfth of the scrape worker's interpreter time (docs/benchmarks.md, the e2e profile), and the banner and
# every warning scroll away in them. The jobs ledger records every attempt (API, admin); a task
# that raises is still logged, at ERROR, by the same loggers.
PER_TASK_LOGGERS = ("celery.app.trace", "celery.worker.strategy")


@after_setup_logger.connect
def _quiet_per_task_lines(**_: object) -> None:
    for name in PER_TASK_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


@after_setup_logger.connect
def _project_log_lines(logger: logging.Logger, **_: object) -> None:
    # Celery replaced Django's handlers on the root logger: give its own the project's format
    # (SCRAPEJOBS_LOG_FORMAT) and the job-context and secrets filters (apps/runtime/logs.py).
    from django.conf import settings  # noqa: PLC0415 - settings are loaded by now

    from apps.runtime.logs import log_handlers_configure  # noqa: PLC0415

    log_handlers_configure(logger, log_format=settings.SCRAPEJOBS_LOG_FORMAT)


@worker_init.connect
@beat_init.connect
def _refuse_insecure_start(sender: object = None, **_: object) -> None:
    """Worker, control and beat refuse to run with unsafe settings (apps/operators/checks.py).
    SystemExit, not the check's exception: Celery logs and swallows an Exception from a signal
    handler and would start anyway. Only for this app: the signals are global, and another Celery
    app in a process that imported this module (the benchmark's naive baseline) is not ours."""
    if getattr(sender, "app", None) is not app:
        return
    from apps.operators.checks import insecure_settings  # noqa: PLC0415 - settings are loaded by now

    problems = insecure_settings()
    if problems:
        raise SystemExit("refusing to start: " + " ".join(problems))


@worker_init.connect
@beat_init.connect
def _tracing_start(sender: object = None, **_: object) -> None:
    """One trace per job (FR-29, docs/tracing.md): the SDK is set up once per process, before any
    task runs, when tracing is configured; otherwise nothing of OpenTelemetry is imported."""
    if getattr(sender, "app", None) is not app:
        return
    from apps.runtime.logs import secrets_masked  # noqa: PLC0415 - settings are loaded by now
    from apps.tracing import tracing_start  # noqa: PLC0415

    # The node name (worker@host, control@host) names the component; beat has none.
    component = str(getattr(sender, "hostname", "") or "beat").partition("@")[0]
    tracing_start(
        component=component, instrument=("celery", "psycopg", "redis", "urllib3"), url_mask=secrets_masked
    )


@worker_init.connect
def _scrape_consumer_options(sender: object = None, **_: object) -> None:
    """A process that consumes only scrape messages (the worker and browser components) turns
    kombu's ack emulation off. The emulation writes a copy of every received message into the
    broker's unacked set and removes it on the acknowledgement: two pipelines per message on the
    consumer's one thread, which also reads and dispatches every message (NFR-11). It buys a
    scrape message nothing: the message is acknowledged as its task starts (apps/scraping/tasks.py)
    and a copy is given back only after the visibility timeout (an hour), while the sweeper
    publishes a job nobody took again after SCRAPEJOBS_REPUBLISH_AFTER_S. Such a process also
    takes a message only when one of its threads is free (``worker_disable_prefetch``, each task's
    end waking its consumer: scrapejobs/task_end_wake.py, docs/design/dispatch.md), so it holds no
    message it has not started, and a stopping or killed one takes none with it. The control
    tasks, acknowledged late, keep the emulation and the prefetch."""
    if getattr(sender, "app", None) is not app:
        return
    if _scrape_only():
        app.conf.broker_transport_options = {**app.conf.broker_transport_options, "ack_emulation": False}
        # No message held without a free thread to run it, each task's end waking the consumer
        # (scrapejobs/task_end_wake.py, NFR-8).
        app.conf.worker_disable_prefetch = True


def _scrape_only() -> bool:
    """Whether this worker consumes scrape messages and nothing else (the worker and browser
    components)."""
    consumed = set(app.amqp.queues.consume_from or ())
    return bool(consumed) and consumed <= {*SCRAPE_QUEUES, BROWSER_QUEUE}


class _ScrapeTaskEndWakesLoop(TaskEndWakesLoop):
    def include_if(self, parent: object) -> bool:
        return getattr(parent, "app", None) is app and _scrape_only()


app.steps["worker"].add(_ScrapeTaskEndWakesLoop)


def _consumes_scrapes(sender: object) -> bool:
    """Whether ``sender`` (a worker, or its consumer) is this app's and consumes scrape messages,
    among others or alone (the worker and browser components)."""
    consumed = set(app.amqp.queues.consume_from or ())
    return getattr(sender, "app", None) is app and bool(consumed & {*SCRAPE_QUEUES, BROWSER_QUEUE})


@worker_init.connect
def _scrape_worker_nice(sender: object = None, **_: object) -> None:
    """A process that consumes scrape messages runs at ``SCRAPEJOBS_WORKER_NICE`` (default 0): on
    a machine it shares, the intake's latency comes first (NFR-2, apps/runtime/priority.py)."""
    from django.conf import settings  # noqa: PLC0415 - Django is set up by now

    if _consumes_scrapes(sender) and settings.SCRAPEJOBS_WORKER_NICE > 0:
        from apps.runtime.priority import process_nice_set  # noqa: PLC0415

        process_nice_set(settings.SCRAPEJOBS_WORKER_NICE)
        logger.info("worker threads at nice %d", settings.SCRAPEJOBS_WORKER_NICE)


@worker_init.connect
def _scrape_claims_batched(sender: object = None, **_: object) -> None:
    """A process that consumes scrape messages makes its claims in batches, one statement for
    every claim waiting (apps.jobs.claims.ClaimBatcher, NFR-11)."""
    if _consumes_scrapes(sender):
        from apps.jobs.claims import claims_batch  # noqa: PLC0415 - Django is set up by now

        claims_batch()


@worker_ready.connect
def _scrape_warm_up(sender: object = None, **_: object) -> None:
    """A process that consumes scrape messages opens and warms its connections before it takes
    its first message, waiting for that a few seconds at most (apps/scraping/warm_up.py): its
    first jobs start as fast as the next."""
    if _consumes_scrapes(sender):
        from apps.scraping.warm_up import worker_warm_up_bounded  # noqa: PLC0415 - Django is set up by now

        threads = int(getattr(getattr(sender, "pool", None), "num_processes", 0) or 1)
        logger.info("warm-up for %d threads: %s", threads, worker_warm_up_bounded(threads=threads))


@worker_ready.connect
def _start_nudge_listener(sender: object = None, **_: object) -> None:
    # The component that runs the control tasks also answers nudges (scrapejobs/nudge_listener.py).
    if CONTROL_QUEUE in app.amqp.queues.consume_from:
        from scrapejobs.nudge_listener import nudge_listener_start  # noqa: PLC0415 - Django is set up by now

        nudge_listener_start()


@worker_shutting_down.connect
def _stop_nudge_listener(**_: object) -> None:
    from scrapejobs.nudge_listener import nudge_listener_stop  # noqa: PLC0415

    nudge_listener_stop()


app.autodiscover_tasks()
